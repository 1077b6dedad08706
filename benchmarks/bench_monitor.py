"""actviz.watch against the bare training loop and against the hand-written monitor.

Training resnet18 (random weights, 10 classes) on CPU, batch 16 of 64x64 random images, SGD
with gradient clipping, the same number of steps in each variant, in one process, in rounds
that alternate the variants so a busy machine slows them all alike:

- bare: the loop alone;
- every=10 / every=1: ``actviz.watch(model, optimizer, layers="conv,linear", every=N)``;
- nonfinite only: ``every=0``, the first-NaN watch on every module and no statistics;
- hand-written: what users write today, a forward hook per conv/linear layer appending
  ``.mean().item()`` and ``.std().item()``, plus ``SummaryWriter.add_histogram`` per parameter
  every step.

Wall time and CPU time (both threads) are both given: on a shared machine the CPU time is the
steadier of the two. Targets: every=10 within 1.03x of bare, every=1 within 1.15x,
nonfinite only within 1.10x.
Also: the log's size per 1,000 steps, and peak RSS over 1,000 steps of a small model (flat:
nothing is kept per step).

    python benchmarks/bench_monitor.py [--steps 40] [--rounds 2] [--size 64]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
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


def make(size: int) -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    data = [
        (
            torch.randn(BATCH, 3, size, size, generator=g),
            torch.randint(0, 10, (BATCH,), generator=g),
        )
        for _ in range(8)
    ]
    return model, optimizer, data


def loop(model: nn.Module, optimizer: Any, data: list[Any], steps: int, after: Any = None) -> None:
    for step in range(steps):
        x, y = data[step % len(data)]
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if after is not None:
            after(loss, step)


def bare(model: nn.Module, optimizer: Any, data: list[Any], steps: int, out: Path) -> None:
    loop(model, optimizer, data, steps)


def watched(every: int) -> Callable[..., None]:
    def run(model: nn.Module, optimizer: Any, data: list[Any], steps: int, out: Path) -> None:
        with actviz.watch(model, optimizer, layers=LAYERS, every=every, out=out) as w:
            loop(model, optimizer, data, steps, lambda loss, _: w.step(loss=loss))

    return run


def hand_written(model: nn.Module, optimizer: Any, data: list[Any], steps: int, out: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    stats: dict[str, list[tuple[float, float]]] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d | nn.Linear):

            def hook(m: nn.Module, a: Any, o: torch.Tensor, name: str = name) -> None:
                stats.setdefault(name, []).append((o.mean().item(), o.std().item()))

            handles.append(module.register_forward_hook(hook))
    writer = SummaryWriter(log_dir=str(out))

    def after(loss: torch.Tensor, step: int) -> None:
        for name, param in model.named_parameters():
            writer.add_histogram(name, param, step)
        writer.add_scalar("loss", loss.item(), step)

    try:
        loop(model, optimizer, data, steps, after)
    finally:
        for handle in handles:
            handle.remove()
        writer.close()


VARIANTS: dict[str, Callable[..., None]] = {
    "bare": bare,
    "every=10": watched(10),
    "every=1": watched(1),
    "nonfinite only": watched(0),
    "hand-written": hand_written,
}
TARGETS = {"every=10": 1.03, "every=1": 1.15, "nonfinite only": 1.10}


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
            if step + 1 in (100, steps):
                marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return marks[0], marks[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rss-steps", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="actviz-bench-monitor-"))
    model, optimizer, data = make(args.size)
    # Warm up: the first optimizer step imports torch's compiler stack; first kernels.
    loop(model, optimizer, data, 3)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    sizes: dict[str, int] = {}
    for r in range(args.rounds):
        for name, run in VARIANTS.items():
            out = work / f"{r}-{name.replace(' ', '_')}"
            gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            run(model, optimizer, data, args.steps, out)
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            log = out / "watch.jsonl"
            if log.exists():
                sizes[name] = log.stat().st_size
    best = {name: min(values) for name, values in seconds.items()}
    best_cpu = {name: min(values) for name, values in cpu.items()}
    base, base_cpu = best["bare"], best_cpu["bare"]
    print(
        f"resnet18 on CPU ({torch.get_num_threads()} threads), batch {BATCH} of "
        f"{args.size}x{args.size}, {args.steps} steps, layers '{LAYERS}' (21), best of "
        f"{args.rounds} rounds"
    )
    for name, value in best.items():
        target = TARGETS.get(name)
        note = f"  (target <= {target})" if target else ""
        print(
            f"    {name:15s} {value:6.2f} s  {value / args.steps * 1000:6.1f} ms/step  "
            f"{value / base:5.2f}x bare; CPU time {best_cpu[name] / base_cpu:5.2f}x{note}"
        )
    print(f"    hand-written / every=1 = {best['hand-written'] / best['every=1']:.2f}")
    for name, size in sizes.items():
        per_1000 = size / args.steps * 1000 / 1024
        print(f"    log size, {name:15s} {per_1000:8.1f} KiB per 1,000 steps")
    before, after = rss_over_steps(args.rss_steps)
    print(
        f"    peak RSS, small conv net watched with every=1: {before:.0f} MiB after 100 steps, "
        f"{after:.0f} MiB after {args.rss_steps} ({after - before:+.1f} MiB)"
    )
    print(
        json.dumps({"seconds": seconds, "cpu": cpu, "log_bytes": sizes, "rss_mib": [before, after]})
    )


if __name__ == "__main__":
    main()
