"""Integrated Gradients: actviz against captum's ``IntegratedGradients``, time and peak memory.

Both run the same IG on the same inputs: resnet18 (random weights), ``--images`` photos at
``--size`` px, ``--steps`` Gauss-Legendre points, the steps through the model ``--batch-size``
rows at a time (captum's ``internal_batch_size``, called on batches of that many images, as a
user loops a folder). Both compute the completeness residual (captum with
``return_convergence_delta=True``; its cost without is printed too). The attributions are
checked equal.

- **time**, in one process, the sides alternated ``--repeats`` times, the order reversed every
  other round (the median of each; every round is printed):
  actviz's IG (``actviz.gradients.integrated.integrated_gradients``) against captum's, on the
  same decoded batches; and the whole ``actviz.attribute`` command (decoding, IG, one picture
  per image, the records) against captum's attributions alone. Target: at least as fast.
- **peak memory**, each side in a fresh process that builds the model and reads the decoded
  batches first: the growth of resident memory while it works (sampled every half millisecond
  by a thread, and the kernel's peak when it rose), for actviz's IG and captum's over every
  image, against the floor, one forward and backward of ``--batch-size`` rows. Target: actviz
  no higher than the floor (1.0x, give or take the allocator's slack).

    python benchmarks/bench_attribute.py [--images 24] [--steps 32] [--batch-size 8] [--size 160]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

MODEL = "resnet18"


def _setup(args: argparse.Namespace) -> tuple[torch.nn.Module, list[torch.Tensor], list[list[int]]]:
    """The model and the decoded batches, as actviz decodes them."""
    from actviz.io.loader import decode_batches
    from actviz.models import load_model

    loaded = load_model(MODEL, weights="none", device="cpu", input_size=(args.size, args.size))
    model = loaded.module.eval()
    folder = Path(args.folder)
    paths = sorted(folder.rglob("*.jpg"))[: args.images]
    batches, targets = [], []
    for batch in decode_batches(paths, loaded.preprocess, batch_size=args.batch_size):
        x = torch.stack([item.tensor for item in batch])
        with torch.no_grad():
            targets.append(model(x).argmax(1).tolist())
        batches.append(x)
    return model, batches, targets


def _actviz_ig(
    model: torch.nn.Module, x: torch.Tensor, targets: list[int], args: argparse.Namespace
) -> torch.Tensor:
    from actviz.gradients.attribution import AttributionJob, AttributionSettings
    from actviz.gradients.integrated import integrated_gradients

    job = AttributionJob(model, x, targets, AttributionSettings(steps=args.steps), args.batch_size)
    return integrated_gradients(job).values


def _captum_ig(
    model: torch.nn.Module,
    x: torch.Tensor,
    targets: list[int],
    args: argparse.Namespace,
    delta: bool = True,
) -> torch.Tensor:
    from captum.attr import IntegratedGradients

    found = IntegratedGradients(model).attribute(
        x,
        target=targets,
        n_steps=args.steps,
        method="gausslegendre",
        internal_batch_size=args.batch_size,
        return_convergence_delta=delta,
    )
    return (found[0] if delta else found).detach()


def _floor(
    model: torch.nn.Module, x: torch.Tensor, targets: list[int], args: argparse.Namespace
) -> None:
    """One forward and backward of ``batch_size`` rows: the least any chunked IG holds."""
    rows = x[: args.batch_size].clone().requires_grad_(True)
    logits = model(rows)
    picked = logits.gather(1, torch.tensor(targets[: args.batch_size])[:, None]).sum()
    torch.autograd.grad(picked, rows)


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Sampler:
    """The largest resident memory seen while the block runs, sampled every half millisecond
    by a thread (torch releases the GIL in its kernels, so the samples keep coming), and the
    process's peak from the kernel when it rose above the peak before."""

    def __enter__(self) -> _Sampler:
        self.peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.start = _rss_mib()
        self.high = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.0005):
            self.high = max(self.high, _rss_mib())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if peak > self.peak_before:
            self.high = max(self.high, peak)

    @property
    def growth(self) -> float:
        return self.high - self.start


def _time_side(
    side: str,
    model: torch.nn.Module,
    batches: list[torch.Tensor],
    targets: list[list[int]],
    args: argparse.Namespace,
    out: Path,
) -> list[torch.Tensor]:
    """One side of the timing: the attributions of every batch (the command's: none)."""
    pairs = list(zip(batches, targets, strict=True))
    if side == "ours":
        return [_actviz_ig(model, x, t, args) for x, t in pairs]
    if side == "theirs":
        return [_captum_ig(model, x, t, args) for x, t in pairs]
    if side == "plain":
        return [_captum_ig(model, x, t, args, delta=False) for x, t in pairs]
    import actviz

    actviz.attribute(
        MODEL, args.folder, method="ig", steps=args.steps, weights="none",
        batch_size=args.batch_size, input_size=(args.size, args.size), out=out, report=False,
    )  # fmt: skip
    return []


def measure(args: argparse.Namespace) -> None:
    """One side's growth of resident memory in this fresh process, as JSON on stdout: the
    model built, the decoded batches and their targets read from the parent's file first."""
    torch.set_num_threads(args.threads)
    from actviz.models import load_model

    loaded = load_model(MODEL, weights="none", device="cpu", input_size=(args.size, args.size))
    model = loaded.module.eval()
    saved = torch.load(args.data, weights_only=True)
    batches, targets = saved["batches"], saved["targets"]
    gc.collect()
    with _Sampler() as sampler:
        for x, t in zip(batches, targets, strict=True):
            if args.measure == "floor":
                _floor(model, x, t, args)
                break
            if args.measure == "actviz":
                _actviz_ig(model, x, t, args)
            else:
                _captum_ig(model, x, t, args)
    print(json.dumps({"side": args.measure, "growth": sampler.growth}))


def _memory(args: argparse.Namespace, data: Path) -> dict[str, float]:
    found = {}
    for side in ("floor", "actviz", "captum"):
        command = [sys.executable, __file__, "--measure", side, "--data", str(data)]
        command += ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
        command += ["--size", str(args.size), "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        found[side] = json.loads(done.stdout.strip().splitlines()[-1])["growth"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--folder", default=None)
    parser.add_argument("--data", default=None)
    parser.add_argument("--measure", choices=("floor", "actviz", "captum"), default=None)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args)
        return
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        args.folder = str(make_folder(Path(tmp) / "photos", args.images))
        model, batches, targets = _setup(args)
        data = Path(tmp) / "batches.pt"
        torch.save({"batches": batches, "targets": targets}, data)
        times: dict[str, list[float]] = {"ours": [], "theirs": [], "plain": [], "command": []}
        cpus: dict[str, list[float]] = {side: [] for side in times}
        for repeat in range(args.repeats):
            order = ["ours", "theirs", "plain", "command"]
            for side in order if repeat % 2 == 0 else order[::-1]:
                start, cpu = time.perf_counter(), time.process_time()
                found = _time_side(side, model, batches, targets, args, Path(tmp) / f"out{repeat}")
                times[side].append(time.perf_counter() - start)
                cpus[side].append(time.process_time() - cpu)
                if side == "ours":
                    ours = found
                elif side == "theirs":
                    theirs = found
        worst = max(
            float((a - b).abs().max() / b.abs().max()) for a, b in zip(ours, theirs, strict=True)
        )
        memory = _memory(args, data)
    ours_s, theirs_s, plain_s, command_s = (
        statistics.median(times[k]) for k in ("ours", "theirs", "plain", "command")
    )
    print(
        f"IG, {MODEL} (random weights), {args.images} images at {args.size} px, {args.steps} "
        f"Gauss-Legendre steps, {args.batch_size} rows a forward and backward, "
        f"{args.threads} threads"
    )
    print(f"  attributions equal to captum's within {worst:.1e} of their largest")
    print("  each repeat (alternated, s): " + ", ".join(
        f"{k} {' '.join(f'{t:.1f}' for t in v)}" for k, v in times.items()
    ))  # fmt: skip
    print("  CPU time of each repeat (s): " + ", ".join(
        f"{k} {' '.join(f'{t:.1f}' for t in v)}" for k, v in cpus.items()
    ))  # fmt: skip
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(
        f"  median CPU time: actviz/captum (delta) {cpu['ours'] / cpu['theirs']:.2f}x, "
        f"actviz/captum {cpu['ours'] / cpu['plain']:.2f}x"
    )
    print(f"  actviz IG          {ours_s:7.2f} s")
    print(f"  captum IG (delta)  {theirs_s:7.2f} s   actviz/captum {ours_s / theirs_s:.2f}x")
    print(f"  captum IG          {plain_s:7.2f} s   actviz/captum {ours_s / plain_s:.2f}x")
    print(
        f"  actviz attribute   {command_s:7.2f} s   (decode, IG, pictures, records) "
        f"/ captum IG (delta) {command_s / theirs_s:.2f}x, / captum IG {command_s / plain_s:.2f}x"
    )
    floor = memory["floor"]
    print(
        f"  peak memory growth: one forward and backward of {args.batch_size} rows {floor:.0f} MiB"
    )
    for side in ("actviz", "captum"):
        print(f"    {side:<7} IG over {args.images} images {memory[side]:6.0f} MiB = "
              f"{memory[side] / floor:.2f}x the floor")  # fmt: skip


if __name__ == "__main__":
    main()
