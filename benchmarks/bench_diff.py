"""actviz diff against actviz stats: two resnet18 checkpoints over a folder of photos.

``actviz diff`` runs two models per batch (each hooked on the same layers) and keeps running
sums of CKA, cosine and relative L2; ``actviz stats`` runs one model and computes per-layer
statistics. Same folder, same layers (every convolution: 20), same batch size, same process,
alternating; the ratio of their wall times is the cost of the comparison. Target: <= 2.5x.
Also measured: the same two commands as whole processes (what a user waits for).

    python benchmarks/bench_diff.py [--images 200] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402

MODEL = "resnet18"
BATCH = 8
LAYERS = "conv"


def checkpoints(root: Path) -> tuple[Path, Path]:
    """A random resnet18, and the same with one convolution's weights perturbed."""
    torch.manual_seed(1)
    state = torchvision.models.resnet18().state_dict()
    torch.save(state, root / "a.pt")
    weight = state["layer2.0.conv2.weight"]
    state["layer2.0.conv2.weight"] = weight + 0.5 * weight.std() * torch.randn_like(weight)
    torch.save(state, root / "b.pt")
    return root / "a.pt", root / "b.pt"


def with_diff(folder: Path, out: Path, a: Path, b: Path) -> int:
    result = actviz.diff(
        MODEL, [folder], weights=str(a), against=b, layers=LAYERS, out=out, batch_size=BATCH
    )
    assert result.first_divergent == "layer2.0.conv2", result.first_divergent
    return len(result.images)


def with_stats(folder: Path, out: Path, a: Path, _b: Path) -> int:
    # What `actviz stats` runs: statistics only, no grids, no report.
    result = actviz.run(
        MODEL,
        [folder],
        layers=LAYERS,
        out=out,
        weights=str(a),
        batch_size=BATCH,
        grids=False,
        report=False,
    )
    return len(result.images)


def process_seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "actviz", *argv], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-processes", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-diff-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    folder = make_folder(work / "photos", args.images)
    a, b = checkpoints(work)

    seconds: dict[str, list[float]] = {"diff": [], "stats": []}
    for _ in range(args.repeat):
        for name, fn in (("diff", with_diff), ("stats", with_stats)):
            out = Path(tempfile.mkdtemp(dir=work))
            start = time.perf_counter()
            n = fn(folder, out, a, b)
            seconds[name].append(time.perf_counter() - start)
            assert n == args.images, (name, n)
    best = {k: min(v) for k, v in seconds.items()}
    print(f"{MODEL}, {args.images} images, --layers {LAYERS} (20 layers), batch {BATCH}")
    for name, value in best.items():
        print(f"    {name:6s} {value:6.1f} s  ({args.images / value:5.2f} images/s)")
    print(f"    diff / stats = {best['diff'] / best['stats']:.2f}  (target <= 2.5)")
    # Each diff against the stats run right after it: a busy machine shows as spread here.
    paired = [d / s for d, s in zip(seconds["diff"], seconds["stats"], strict=True)]
    print(f"    paired runs: {', '.join(f'{r:.2f}' for r in paired)}")

    if not args.skip_processes:
        common = [str(folder), "--layers", LAYERS, "-b", str(BATCH), "-q", "--weights", str(a)]
        diff_s = process_seconds(
            ["diff", MODEL, *common, "--against", str(b), "-o", str(work / "p-diff")]
        )
        stats_s = process_seconds(["stats", MODEL, *common, "-o", str(work / "p-stats")])
        print(
            f"    whole processes: actviz diff {diff_s:.1f} s, actviz stats {stats_s:.1f} s, "
            f"ratio {diff_s / stats_s:.2f}"
        )
    print(json.dumps({"seconds": seconds}))


if __name__ == "__main__":
    main()
