"""actviz cam-eval against a script that loops pytorch-grad-cam's metrics one image at a time.

Both score the same maps on the same inputs: the maps cam-eval computed (Grad-CAM and EigenCAM
of resnet18's last block, random weights) and the three baselines (random, centred Gaussian,
Sobel). For each image and map the script calls pytorch-grad-cam's ``DropInConfidence`` and
``IncreaseInConfidence``, and builds the deletion and insertion curves with its
``PerturbationConfidenceMetric`` one step at a time (one forward per step and image, which is
what its metrics do). cam-eval is timed as a whole (decoding, the maps and their backward pass,
the baselines, every curve, the summary and ``cam-eval.json``; torchvision already imported,
as for the script); the script only the metrics, given the maps and the model for free. The
areas of the two are checked equal. Target: cam-eval >= 3x faster.

    python benchmarks/bench_cam_eval.py [--images 24] [--steps 16] [--size 128]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

from actviz.cam_eval import cam_eval  # noqa: E402
from actviz.cam_eval.metrics import Protocol, baseline_maps, blurred  # noqa: E402

MODEL = "resnet18"
METHODS = ("gradcam", "eigencam")


def run_cam_eval(folder: Path, out: Path, steps: int, size: int) -> tuple[float, dict]:
    # torchvision's import (about 2.5 s here) is the process's start-up, paid once by both
    # sides: the loop below is timed without it, so cam-eval is too.
    import torchvision  # noqa: F401

    start = time.perf_counter()
    result = cam_eval(
        MODEL,
        [folder],
        out=out,
        weights="none",
        methods=METHODS,
        layers="layer4",
        steps=steps,
        sanity_blocks=0,
        report=False,
        batch_size=8,
        input_size=(size, size),
    )
    seconds = time.perf_counter() - start
    return seconds, json.loads(result.record.read_text())


def loop_pytorch_grad_cam(record: dict, steps: int, size: int) -> tuple[float, dict]:
    """pytorch-grad-cam's metrics, one image at a time, on cam-eval's maps and baselines."""
    from pytorch_grad_cam.metrics.cam_mult_image import DropInConfidence, IncreaseInConfidence
    from pytorch_grad_cam.metrics.perturbation_confidence import PerturbationConfidenceMetric
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    from actviz.models import load_model

    loaded = load_model(MODEL, weights="none", device="cpu", input_size=(size, size))
    model = loaded.module.eval()
    from PIL import Image

    inputs, maps, targets = [], [], []
    protocol = Protocol(steps=steps)
    for item in record["images"]:
        with Image.open(item["path"]) as im:
            x = loaded.preprocess(im.convert("RGB"))[None]
        grid = np.asarray(item["maps"]["gradcam"]).shape
        seed = zlib.crc32(item["image"].encode()) ^ protocol.seed
        every = {m: torch.tensor(item["maps"][m])[None] for m in METHODS}
        every.update(baseline_maps(x, grid, protocol, [seed]))
        up = {
            k: F.interpolate(v[:, None].float(), size=(size, size), mode="bilinear")[0, 0]
            for k, v in every.items()
        }
        inputs.append(x)
        maps.append(up)
        targets.append(item["target"])
    pixels = size * size
    step = -(-pixels // steps)
    counts = [min(i * step, pixels) for i in range(steps + 1)]
    start = time.perf_counter()
    areas: dict = {}
    for x, up, t in zip(inputs, maps, targets, strict=True):
        target = [ClassifierOutputSoftmaxTarget(t)]
        base = blurred(x)
        for name, cam in up.items():
            cams = cam.numpy()[None]
            DropInConfidence()(x, cams, target, model)
            IncreaseInConfidence()(x, cams, target, model)
            order = torch.argsort(-cam.flatten(), stable=True)
            curves = []
            for substrate, keep_first in ((torch.zeros_like(x), False), (base, True)):
                ys = []
                for count in counts:
                    gone = torch.zeros(pixels, dtype=torch.bool)
                    gone[order[:count]] = True
                    gone = gone.view(size, size)

                    def perturb(
                        image: torch.Tensor,
                        _cam: torch.Tensor,
                        gone=gone,
                        substrate=substrate,
                        keep_first=keep_first,
                    ) -> torch.Tensor:
                        if keep_first:  # insertion: the salient pixels come back
                            return torch.where(gone, image, substrate[0])
                        return torch.where(gone, substrate[0], image)

                    metric = PerturbationConfidenceMetric(perturb)
                    ys.append(float(metric(x, cams, target, model, return_diff=False)[0]))
                curves.append(np.trapezoid(ys, np.asarray(counts) / pixels))
            areas.setdefault(name, []).append(curves)
    return time.perf_counter() - start, areas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-cam-eval-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    folder = make_folder(work / "photos", args.images)
    ours, record = run_cam_eval(folder, work / "out", args.steps, args.size)
    theirs, areas = loop_pytorch_grad_cam(record, args.steps, args.size)
    ok = [r for r in record["images"] if r["status"] == "ok"]
    worst = 0.0
    for name, per_image in areas.items():
        for r, (d, i) in zip(ok, per_image, strict=True):
            s = r["scores"][name]
            worst = max(worst, abs(s["deletion_auc"] - d), abs(s["insertion_auc"] - i))
    maps = len(METHODS) + 3
    forwards = len(ok) * maps * (2 * (args.steps + 1) + 1)
    print(
        f"{MODEL} (random weights) at layer4, {len(ok)} images at {args.size} px, "
        f"{maps} maps (Grad-CAM, EigenCAM, 3 baselines), {args.steps} steps: {forwards} "
        f"perturbed images; {torch.get_num_threads()} torch threads, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared with other jobs: noisy)"
    )
    print(f"    actviz cam-eval (whole command)             {ours:7.1f} s")
    print(f"    pytorch-grad-cam metrics, image by image    {theirs:7.1f} s")
    print(f"    speed-up: {theirs / ours:.1f}x  (target >= 3x)")
    print(f"    largest difference between the two areas: {worst:.2e}")


if __name__ == "__main__":
    main()
