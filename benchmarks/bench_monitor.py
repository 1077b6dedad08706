"""actviz.watch against the bare training loop and against the hand-written monitor.

Training resnet18 (random weights, 10 classes) on CPU, batch 16 of 64x64 random images, SGD
with gradient clipping, in one process, each variant on its own copy of the model:

- bare: the loop alone;
- every=10 / every=1: ``actviz.watch(model, optimizer, layers="conv,linear", every=N)``;
- nonfinite only: ``every=0``, the first-NaN watch on every module and no statistics;
- hand-written: what users write today, a forward hook per conv/linear layer appending
  ``.mean().item()`` and ``.std().item()``, plus ``SummaryWriter.add_histogram`` per parameter
  every step.

The variants run in blocks of ``--block`` steps, in rounds of one block each (in an order
that changes every round, see :func:`orders`), so a busy machine slows them all alike. A
block's first step is not counted: it follows another model's step, while a training loop's
step follows its own (its weights still in the caches). Each round gives each variant's
median step over its block, divided by the bare block's of the same round; the medians of
those ratios over the rounds are printed, for wall time and for CPU time (both threads). On
a shared machine the CPU time is the steadier of the two. Targets: every=10 within 1.03x of
bare, every=1 within 1.15x, nonfinite only within 1.10x.

Then a second setup, resnet18 in batches of 8 at 112x112, conv and linear layers, plain SGD
(momentum, no clipping): bare, every=10 and every=1, measured the same way, in ``--processes``
fresh processes one after the other; each process's ratios are printed, then their medians.
Target: every=1 within 1.15x. In one process a run's ratio moves more from one process to the
next (every=1: 1.11x-1.19x over eleven runs of 40 rounds) than its rounds let it move within
one: where the four models' memory lands, and what else the machine did in that minute, stay
the same for a whole process. pyperf runs its worker processes for the same reason.

Also: the log's size per 1,000 steps, and peak RSS over 1,000 steps of a small model (flat:
nothing is kept per step).

    python benchmarks/bench_monitor.py [--rounds 10] [--block 4] [--size 64]
        [--small-rounds 20] [--processes 3] [--rss-steps 1000] [--threads N] [--only-small]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

import actviz

BATCH = 16
LAYERS = "conv,linear"


def make(
    size: int, batch: int = BATCH
) -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    data = [
        (
            torch.randn(batch, 3, size, size, generator=g),
            torch.randint(0, 10, (batch,), generator=g),
        )
        for _ in range(8)
    ]
    return model, optimizer, data


def one_step(model: nn.Module, optimizer: Any, batch: Any, clip: bool = True) -> torch.Tensor:
    x, y = batch
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    return loss


class Variant:
    """One way of training, on its own copy of the model, opened once and stepped in turn."""

    def __init__(
        self, name: str, size: int, out: Path, batch: int = BATCH, clip: bool = True
    ) -> None:
        self.name = name
        self.model, self.optimizer, self.data = make(size, batch)
        self.clip = clip
        self.out = out
        self.stack = contextlib.ExitStack()
        self.after: Callable[[torch.Tensor, int], None] = lambda loss, step: None
        self.steps = 0  # run since the watch opened
        self.walls: list[float] = []  # each counted step's
        self.cpus: list[float] = []
        self.wall_ratios: list[float] = []  # each round's, to the bare block's
        self.cpu_ratios: list[float] = []

    def open(self) -> None:
        if self.name.startswith("every=") or self.name == "nonfinite only":
            every = 0 if self.name == "nonfinite only" else int(self.name.split("=")[1])
            w = self.stack.enter_context(
                actviz.watch(self.model, self.optimizer, layers=LAYERS, every=every, out=self.out)
            )
            self.after = lambda loss, step: w.step(loss=loss)
        elif self.name == "hand-written":
            self.after = hand_written(self.model, self.out, self.stack)

    def step(self, step: int, *, counted: bool = True) -> None:
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = one_step(self.model, self.optimizer, self.data[step % len(self.data)], self.clip)
        self.after(loss, step)
        self.steps += 1
        if counted:
            self.walls.append(time.perf_counter() - start)
            self.cpus.append(time.process_time() - start_cpu)

    def warm_up(self) -> None:
        """Two steps before the watch opens (the first optimizer step imports torch's compiler
        stack; first kernels), then open it."""
        for step in range(2):
            one_step(self.model, self.optimizer, self.data[step], self.clip)
        self.open()


def hand_written(
    model: nn.Module, out: Path, stack: contextlib.ExitStack
) -> Callable[[torch.Tensor, int], None]:
    """The recipe users write today: a forward hook per layer with an ``.item()`` each, and
    ``add_histogram`` per parameter every step."""
    from torch.utils.tensorboard import SummaryWriter

    stats: dict[str, list[tuple[float, float]]] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d | nn.Linear):

            def hook(m: nn.Module, a: Any, o: torch.Tensor, name: str = name) -> None:
                stats.setdefault(name, []).append((o.mean().item(), o.std().item()))

            stack.callback(module.register_forward_hook(hook).remove)
    writer = SummaryWriter(log_dir=str(out))
    stack.callback(writer.close)

    def after(loss: torch.Tensor, step: int) -> None:
        for name, param in model.named_parameters():
            writer.add_histogram(name, param, step)
        writer.add_scalar("loss", loss.item(), step)
        for values in stats.values():
            values.clear()  # what a script would log, then drop

    return after


def orders(n: int, rounds: int) -> list[tuple[int, ...]]:
    """The order of the ``n`` variants in each round: every permutation in turn, shuffled
    (seeded). A block runs after what the one before it left in the caches and the allocator
    (the hand-written recipe's histograms leave the most): rotating one order would have each
    variant always follow the same other, and bias its times; this way each follows each
    other alike."""
    every = list(itertools.permutations(range(n)))
    random.Random(0).shuffle(every)
    return [every[r % len(every)] for r in range(rounds)]


def in_blocks(variants: list[Variant], rounds: int, block: int) -> None:
    """Step the variants (the first one bare) in ``rounds`` rounds of one block of ``block``
    steps each, and give each its per-round ratios to the bare block."""
    step = 0
    for order in orders(len(variants), rounds):
        medians = {}
        for k in order:
            variant = variants[k]
            for i in range(block):
                variant.step(step, counted=i > 0)
                step += 1
            medians[k] = (
                statistics.median(variant.walls[1 - block :]),
                statistics.median(variant.cpus[1 - block :]),
            )
        for k, variant in enumerate(variants):
            variant.wall_ratios.append(medians[k][0] / medians[0][0])
            variant.cpu_ratios.append(medians[k][1] / medians[0][1])
    for variant in variants:
        variant.stack.close()


def summaries(variants: list[Variant], targets: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each variant's median ms per step and median ratios to bare (wall and CPU), printed a
    line each with its target from ``targets``."""
    result = {}
    for variant in variants:
        row = {
            "ms": statistics.median(variant.walls) * 1000,
            "wall_ratio": statistics.median(variant.wall_ratios),
            "cpu_ratio": statistics.median(variant.cpu_ratios),
        }
        print_row(variant.name, row, targets.get(variant.name))
        result[variant.name] = row
    return result


def print_row(name: str, row: dict[str, float], target: float | None) -> None:
    """One variant's line: ms per step, wall and CPU ratios to bare, and its target."""
    note = f"  (target <= {target})" if target else ""
    print(
        f"    {name:15s} {row['ms']:7.1f} ms/step  {row['wall_ratio']:5.2f}x bare; "
        f"CPU time {row['cpu_ratio']:5.2f}x{note}"
    )


NAMES = ("bare", "every=10", "every=1", "nonfinite only", "hand-written")
TARGETS = {"every=10": 1.03, "every=1": 1.15, "nonfinite only": 1.10}


#: The second setup: resnet18 in batches of 8 at 112x112, plain SGD.
SMALL_BATCH, SMALL_SIZE = 8, 112
SMALL_NAMES = ("bare", "every=10", "every=1")


def small_batches(rounds: int, block: int, work: Path) -> dict[str, dict[str, float]]:
    """Bare, every=10 and every=1 on the second setup (see :func:`in_blocks`); returns each
    one's numbers (see :func:`summaries`)."""
    variants = [
        Variant(name, SMALL_SIZE, work / f"small_{name}", batch=SMALL_BATCH, clip=False)
        for name in SMALL_NAMES
    ]
    for variant in variants:
        variant.warm_up()
    in_blocks(variants, rounds, block)
    print(
        f"resnet18 on CPU ({torch.get_num_threads()} threads), batch {SMALL_BATCH} of "
        f"{SMALL_SIZE}x{SMALL_SIZE}, SGD without clipping, layers '{LAYERS}', {rounds} rounds "
        f"of a block of {block} steps each; medians of the per-round ratios to bare"
    )
    return summaries(variants, {"every=1": TARGETS["every=1"]})


def small_in_processes(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """:func:`small_batches` in ``args.processes`` fresh processes, one after the other: each
    one's ratios printed, and returned their medians (ms, wall and CPU ratios) by variant."""
    runs: list[dict[str, dict[str, float]]] = []
    command = [sys.executable, __file__, "--only-small", "--processes", "1"]
    command += ["--small-rounds", str(args.small_rounds), "--block", str(args.block)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    for i in range(args.processes):
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if i == 0:
            print(lines[0])  # the setup
        runs.append(json.loads(lines[-1])["small_batches"])
        ratios = ", ".join(
            f"{name} {row['wall_ratio']:.2f}x (CPU {row['cpu_ratio']:.2f}x)"
            for name, row in runs[-1].items()
            if name != "bare"
        )
        print(f"    process {i + 1}: bare {runs[-1]['bare']['ms']:.1f} ms/step; {ratios}")
    result = {
        name: {key: statistics.median(run[name][key] for run in runs) for key in runs[0][name]}
        for name in runs[0]
    }
    print(f"  medians of the {args.processes} processes:")
    for name, row in result.items():
        print_row(name, row, TARGETS["every=1"] if name == "every=1" else None)
    return result


def rss_over_steps(steps: int) -> tuple[float, float]:
    """Peak RSS (MiB) after 100 steps and after ``steps`` steps of a small conv net watched
    with every=1."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10),
    )  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))) for _ in range(4)]
    marks = []
    with (
        tempfile.TemporaryDirectory() as out,
        actviz.watch(model, optimizer, every=1, out=out) as w,
    ):
        for step in range(steps):
            x, y = data[step % 4]
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step(loss=loss)
            if step + 1 in (min(100, steps), steps):
                marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return marks[0], marks[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the first setup")
    parser.add_argument("--block", type=int, default=4, help="steps per block (one not counted)")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--small-rounds", type=int, default=20, help="rounds of the second setup")
    parser.add_argument(
        "--processes", type=int, default=3, help="fresh processes of the second setup"
    )
    parser.add_argument("--rss-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--only-small", action="store_true", help="the second setup alone")
    args = parser.parse_args()
    if args.block < 2:
        parser.error("--block must be at least 2: a block's first step is not counted")
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-monitor-", ignore_cleanup_errors=True
    ) as work:
        run(args, Path(work))


def run(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its logs written under ``work``."""
    if args.only_small:
        if args.processes > 1:
            small = small_in_processes(args)
        else:
            small = small_batches(args.small_rounds, args.block, work)
        print(json.dumps({"small_batches": small}))
        return
    variants = [Variant(name, args.size, work / name.replace(" ", "_")) for name in NAMES]
    for variant in variants:
        variant.warm_up()
    in_blocks(variants, args.rounds, args.block)
    print(
        f"resnet18 on CPU ({torch.get_num_threads()} threads), batch {BATCH} of "
        f"{args.size}x{args.size}, layers '{LAYERS}' (21), {args.rounds} rounds of a block of "
        f"{args.block} steps each; medians of the per-round ratios to bare"
    )
    numbers = summaries(variants, TARGETS)
    hand, every1 = numbers["hand-written"], numbers["every=1"]
    print(
        f"    hand-written / every=1 = {hand['wall_ratio'] / every1['wall_ratio']:.2f} (wall), "
        f"{hand['cpu_ratio'] / every1['cpu_ratio']:.2f} (CPU)"
    )
    sizes = {}
    for variant in variants:
        log = variant.out / "watch.jsonl"
        if log.exists():
            sizes[variant.name] = log.stat().st_size
            per_1000 = sizes[variant.name] / variant.steps * 1000 / 1024
            print(f"    log size, {variant.name:15s} {per_1000:8.1f} KiB per 1,000 steps")
    if args.processes > 1:
        small = small_in_processes(args)
    else:
        small = small_batches(args.small_rounds, args.block, work)
    before, after = rss_over_steps(args.rss_steps)
    print(
        f"    peak RSS, small conv net watched with every=1: {before:.0f} MiB after 100 steps, "
        f"{after:.0f} MiB after {args.rss_steps} ({after - before:+.1f} MiB)"
    )
    print(
        json.dumps(
            {
                "first_setup": numbers,
                "log_bytes": sizes,
                "small_batches": small,
                "rss_mib": [before, after],
            }
        )
    )


if __name__ == "__main__":
    main()
