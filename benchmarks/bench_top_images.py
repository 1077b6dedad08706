"""top-images on a folder of photos: against a plain forward pass, and its memory.

- time: wall time of ``actviz.top_images`` (resnet18, random weights, ``--layers layer4``:
  512 channels, k = 9, every picture, the JSON and the report) against the floor of the same
  work: a batched forward pass over the same folder with no hooks, the same batch size and the
  same decoding (actviz's decoder and preprocessing), nothing written. Same process,
  alternating, best of ``--repeat``. Also the time of each phase of top_images.
- memory: peak resident memory of a fresh process running top_images over ``--images`` and
  over ten times as many images; a running top-k per channel keeps them within a few percent.

    python benchmarks/bench_top_images.py [--images 200] [--repeat 2] [--skip-memory]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder, peak_rss_mib  # noqa: E402

import actviz  # noqa: E402
from actviz.io.loader import decode_batches  # noqa: E402
from actviz.models import load_model  # noqa: E402

MODEL = "resnet18"
LAYERS = "layer4"
BATCH = 8


def floor(folder: Path) -> int:
    """A batched forward pass with no hooks: decode, preprocess, stack, run."""
    loaded = load_model(MODEL, weights="none", device="cpu")
    paths = sorted(p for p in folder.rglob("*.jpg"))
    count = 0
    batches = decode_batches(paths, loaded.preprocess, batch_size=BATCH)
    with contextlib.closing(batches), torch.inference_mode():
        for batch in batches:
            x = torch.stack([item.tensor for item in batch if item.tensor is not None])
            loaded.module(x)
            count += len(x)
    return count


class Phases:
    """A reporter that notes when the pass starts and ends."""

    def __init__(self) -> None:
        self.started = 0.0
        self.last = 0.0

    def warn(self, message: str) -> None:
        pass

    def start(self, total: int) -> None:
        self.started = time.perf_counter()

    def advance(self, result: object) -> None:
        self.last = time.perf_counter()


def with_actviz(folder: Path, out: Path) -> tuple[int, dict[str, float]]:
    phases = Phases()
    begin = time.perf_counter()
    result = actviz.top_images(
        MODEL, [folder], layers=LAYERS, out=out, weights="none", batch_size=BATCH, reporter=phases
    )
    end = time.perf_counter()
    sheets = list((out / "top-images").rglob("c*.png"))
    assert len(sheets) == 512 and result.images == len(list(folder.rglob("*.jpg")))
    split = {
        "load + probe": phases.started - begin,
        "pass": phases.last - phases.started,
        "pictures + json + report": end - phases.last,
    }
    return result.images, split


def peak_rss(folder: Path) -> float:
    return peak_rss_mib(
        f"actviz.top_images({MODEL!r}, [folder], layers={LAYERS!r}, out=tempfile.mkdtemp(),"
        f" weights='none', batch_size={BATCH})",
        folder,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="actviz-bench-", ignore_cleanup_errors=True) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    folder = make_folder(work / "photos", args.images)
    floor(folder)  # warm-up: imports, allocator

    times: dict[str, list[float]] = {"top_images": [], "floor": []}
    splits: list[dict[str, float]] = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        n = floor(folder)
        times["floor"].append(time.perf_counter() - start)
        start = time.perf_counter()
        n, split = with_actviz(folder, Path(tempfile.mkdtemp(dir=work)))
        times["top_images"].append(time.perf_counter() - start)
        splits.append(split)
    best = {k: min(v) for k, v in times.items()}
    split = splits[times["top_images"].index(best["top_images"])]
    print(f"{MODEL}, {args.images} photos, --layers {LAYERS} (512 channels, k=9), batch {BATCH}")
    print(f"    top_images {best['top_images']:6.2f} s  ({n / best['top_images']:.1f} images/s)")
    print(f"    floor      {best['floor']:6.2f} s  (forward pass only, no hooks)")
    print(f"    top_images / floor = {best['top_images'] / best['floor']:.2f}  (target <= 1.5)")
    print(
        "    where top_images' time goes: " + ", ".join(f"{k} {v:.1f} s" for k, v in split.items())
    )

    if not args.skip_memory:
        many = make_folder(work / "photos_many", args.images * 10, seed=1)
        rss = {args.images: peak_rss(folder), args.images * 10: peak_rss(many)}
        small, large = rss[args.images], rss[args.images * 10]
        print(
            f"    peak RSS: {args.images} images {small:.0f} MiB, {args.images * 10} images "
            f"{large:.0f} MiB; ratio {large / small:.3f}  (target <= 1.10)"
        )
    print(json.dumps({"seconds": times, "split": splits}))


if __name__ == "__main__":
    main()
