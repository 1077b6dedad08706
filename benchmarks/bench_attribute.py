"""Integrated Gradients: actviz against captum's ``IntegratedGradients``, time and peak memory.

Both run the same IG on the same inputs: resnet18 (random weights), ``--images`` photos at
``--size`` px, ``--steps`` Gauss-Legendre points, the steps through the model ``--batch-size``
rows at a time (captum's ``internal_batch_size``, called on batches of that many images, as a
user loops a folder). Both compute the completeness residual (captum with
``return_convergence_delta=True``; its cost without is printed too). The attributions are
checked equal.

- **time**, in one process, the two alternated ``--repeats`` times (the fastest of each):
  actviz's IG (``actviz.gradients.integrated.integrated_gradients``) against captum's, on the
  same decoded batches; and the whole ``actviz.attribute`` command (decoding, IG, one picture
  per image, the records) against captum's attributions alone. Target: at least as fast.
- **peak memory**, each side in a fresh process (the growth of its peak resident memory over
  what the model and the inputs took): actviz's IG and captum's over every image, against the
  floor, one forward and backward of ``--batch-size`` rows. Target: actviz no higher than the
  floor (1.0x, give or take the allocator's slack).

    python benchmarks/bench_attribute.py [--images 24] [--steps 32] [--batch-size 8] [--size 160]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
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


def measure(args: argparse.Namespace) -> None:
    """One side's peak memory in this fresh process, as JSON on stdout."""
    torch.set_num_threads(args.threads)
    model, batches, targets = _setup(args)
    before = _rss_mib()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for x, t in zip(batches, targets, strict=True):
        if args.measure == "floor":
            _floor(model, x, t, args)
            break
        if args.measure == "actviz":
            _actviz_ig(model, x, t, args)
        else:
            _captum_ig(model, x, t, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"side": args.measure, "rss_before": before, "peak_before": peak_before,
                      "peak": peak, "growth": peak - max(before, peak_before)}))  # fmt: skip


def _memory(args: argparse.Namespace) -> dict[str, float]:
    found = {}
    for side in ("floor", "actviz", "captum"):
        command = [sys.executable, __file__, "--measure", side, "--folder", args.folder]
        command += ["--images", str(args.images), "--steps", str(args.steps)]
        command += ["--batch-size", str(args.batch_size), "--size", str(args.size)]
        command += ["--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        found[side] = json.loads(done.stdout.strip().splitlines()[-1])["growth"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--folder", default=None)
    parser.add_argument("--measure", choices=("floor", "actviz", "captum"), default=None)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args)
        return
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        args.folder = str(make_folder(Path(tmp) / "photos", args.images))
        model, batches, targets = _setup(args)
        ours_t, theirs_t, plain_t, command_t = [], [], [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            ours = [_actviz_ig(model, x, t, args) for x, t in zip(batches, targets, strict=True)]
            ours_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            theirs = [_captum_ig(model, x, t, args) for x, t in zip(batches, targets, strict=True)]
            theirs_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            for x, t in zip(batches, targets, strict=True):
                _captum_ig(model, x, t, args, delta=False)
            plain_t.append(time.perf_counter() - start)
            import actviz

            start = time.perf_counter()
            actviz.attribute(
                MODEL, args.folder, method="ig", steps=args.steps, weights="none",
                batch_size=args.batch_size, input_size=(args.size, args.size),
                out=Path(tmp) / f"out{len(command_t)}", report=False,
            )  # fmt: skip
            command_t.append(time.perf_counter() - start)
        worst = max(
            float((a - b).abs().max() / b.abs().max()) for a, b in zip(ours, theirs, strict=True)
        )
        memory = _memory(args)
    ours_s, theirs_s, plain_s, command_s = (
        min(ours_t), min(theirs_t), min(plain_t), min(command_t),
    )  # fmt: skip
    print(
        f"IG, {MODEL} (random weights), {args.images} images at {args.size} px, {args.steps} "
        f"Gauss-Legendre steps, {args.batch_size} rows a forward and backward, "
        f"{args.threads} threads"
    )
    print(f"  attributions equal to captum's within {worst:.1e} of their largest")
    print(f"  actviz IG          {ours_s:7.2f} s")
    print(f"  captum IG (delta)  {theirs_s:7.2f} s   actviz/captum {ours_s / theirs_s:.2f}x")
    print(f"  captum IG          {plain_s:7.2f} s   actviz/captum {ours_s / plain_s:.2f}x")
    print(
        f"  actviz attribute   {command_s:7.2f} s   (decode, IG, pictures, records) "
        f"/ captum IG (delta) {command_s / theirs_s:.2f}x"
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
