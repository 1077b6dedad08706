"""actviz.watch against the bare training loop and against the hand-written monitor.

Training resnet18 (random weights, 10 classes) on CPU, batch 16 of 64x64 random images, SGD
with gradient clipping, the same number of steps in each variant, in one process, stepping
the variants in turn (each on its own copy of the model) so a busy machine slows
them all alike:

- bare: the loop alone;
- every=10 / every=1: ``actviz.watch(model, optimizer, layers="conv,linear", every=N)``;
- nonfinite only: ``every=0``, the first-NaN watch on every module and no statistics;
- hand-written: what users write today, a forward hook per conv/linear layer appending
  ``.mean().item()`` and ``.std().item()``, plus ``SummaryWriter.add_histogram`` per parameter
  every step.

Wall time and CPU time (both threads) are both given: on a shared machine the CPU time is the
steadier of the two. Targets: every=10 within 1.03x of bare, every=1 within 1.15x,
nonfinite only within 1.10x.

Then a second setup, resnet18 in batches of 8 at 112x112, conv and linear layers, plain SGD
(momentum, no clipping): bare, every=10 and every=1, one step of each in turn per round (the
order rotating), each round giving each watch's ratio to the bare step beside it; the medians
of those ratios are printed (on a busy machine they are indicative). Target: every=1 within
1.15x.

Also: the log's size per 1,000 steps, and peak RSS over 1,000 steps of a small model (flat:
nothing is kept per step).

    python benchmarks/bench_monitor.py [--steps 40] [--size 64] [--rounds 30] [--rss-steps 1000]
        [--threads N] [--only-small]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
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
        self.seconds = 0.0
        self.cpu = 0.0
        self.walls: list[float] = []  # each step's
        self.cpus: list[float] = []

    def open(self) -> None:
        if self.name.startswith("every=") or self.name == "nonfinite only":
            every = 0 if self.name == "nonfinite only" else int(self.name.split("=")[1])
            w = self.stack.enter_context(
                actviz.watch(self.model, self.optimizer, layers=LAYERS, every=every, out=self.out)
            )
            self.after = lambda loss, step: w.step(loss=loss)
        elif self.name == "hand-written":
            self.after = hand_written(self.model, self.out, self.stack)

    def step(self, step: int) -> None:
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = one_step(self.model, self.optimizer, self.data[step % len(self.data)], self.clip)
        self.after(loss, step)
        self.walls.append(time.perf_counter() - start)
        self.cpus.append(time.process_time() - start_cpu)
        self.seconds += self.walls[-1]
        self.cpu += self.cpus[-1]

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


NAMES = ("bare", "every=10", "every=1", "nonfinite only", "hand-written")
TARGETS = {"every=10": 1.03, "every=1": 1.15, "nonfinite only": 1.10}


#: The second setup: resnet18 in batches of 8 at 112x112, plain SGD.
SMALL_BATCH, SMALL_SIZE = 8, 112
SMALL_NAMES = ("bare", "every=10", "every=1")


def small_batches(rounds: int, work: Path) -> dict[str, dict[str, float]]:
    """Bare, every=10 and every=1 on the second setup, one step each per round in a rotating
    order; returns each watch's median ratio to the bare step of the same round (wall and
    CPU) and the median milliseconds per step."""
    variants = [
        Variant(name, SMALL_SIZE, work / f"small_{name}", batch=SMALL_BATCH, clip=False)
        for name in SMALL_NAMES
    ]
    for variant in variants:
        variant.warm_up()
    for step in range(rounds):
        for k in range(len(variants)):
            variants[(step + k) % len(variants)].step(step)
    for variant in variants:
        variant.stack.close()
    bare = variants[0]
    print(
        f"resnet18 on CPU ({torch.get_num_threads()} threads), batch {SMALL_BATCH} of "
        f"{SMALL_SIZE}x{SMALL_SIZE}, SGD without clipping, layers '{LAYERS}', {rounds} rounds "
        "of one step each in turn; medians of the per-round ratios to bare"
    )
    result = {}
    for variant in variants:
        wall = statistics.median(w / b for w, b in zip(variant.walls, bare.walls, strict=True))
        cpu = statistics.median(c / b for c, b in zip(variant.cpus, bare.cpus, strict=True))
        ms = statistics.median(variant.walls) * 1000
        target = TARGETS.get(variant.name)
        note = f"  (target <= {target})" if target and variant.name == "every=1" else ""
        print(
            f"    {variant.name:15s} {ms:7.1f} ms/step  {wall:5.2f}x bare; "
            f"CPU time {cpu:5.2f}x{note}"
        )
        result[variant.name] = {"ms": ms, "wall_ratio": wall, "cpu_ratio": cpu}
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
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=30, help="rounds of the second setup")
    parser.add_argument("--rss-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--only-small", action="store_true", help="the second setup alone")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-monitor-", ignore_cleanup_errors=True
    ) as work:
        run(args, Path(work))


def run(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its logs written under ``work``."""
    if args.only_small:
        print(json.dumps({"small_batches": small_batches(args.rounds, work)}))
        return
    variants = [Variant(name, args.size, work / name.replace(" ", "_")) for name in NAMES]
    for variant in variants:
        variant.warm_up()
    # Step by step in turn, starting with a different variant each step: a busy machine
    # slows them all alike.
    for step in range(args.steps):
        for k in range(len(variants)):
            variants[(step + k) % len(variants)].step(step)
    for variant in variants:
        variant.stack.close()
    base, base_cpu = variants[0].seconds, variants[0].cpu
    print(
        f"resnet18 on CPU ({torch.get_num_threads()} threads), batch {BATCH} of "
        f"{args.size}x{args.size}, {args.steps} steps each, layers '{LAYERS}' (21), the five "
        "loops stepped in turn"
    )
    for variant in variants:
        target = TARGETS.get(variant.name)
        note = f"  (target <= {target})" if target else ""
        print(
            f"    {variant.name:15s} {variant.seconds / args.steps * 1000:7.1f} ms/step  "
            f"{variant.seconds / base:5.2f}x bare; CPU time {variant.cpu / base_cpu:5.2f}x{note}"
        )
    by_name = {v.name: v for v in variants}
    print(
        "    hand-written / every=1 = "
        f"{by_name['hand-written'].seconds / by_name['every=1'].seconds:.2f} (wall), "
        f"{by_name['hand-written'].cpu / by_name['every=1'].cpu:.2f} (CPU)"
    )
    sizes = {}
    for variant in variants:
        log = variant.out / "watch.jsonl"
        if log.exists():
            sizes[variant.name] = log.stat().st_size
            per_1000 = sizes[variant.name] / args.steps * 1000 / 1024
            print(f"    log size, {variant.name:15s} {per_1000:8.1f} KiB per 1,000 steps")
    seconds = {v.name: v.seconds for v in variants}
    cpu = {v.name: v.cpu for v in variants}
    small = small_batches(args.rounds, work)
    before, after = rss_over_steps(args.rss_steps)
    print(
        f"    peak RSS, small conv net watched with every=1: {before:.0f} MiB after 100 steps, "
        f"{after:.0f} MiB after {args.rss_steps} ({after - before:+.1f} MiB)"
    )
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu": cpu,
                "log_bytes": sizes,
                "small_batches": small,
                "rss_mib": [before, after],
            }
        )
    )


if __name__ == "__main__":
    main()
