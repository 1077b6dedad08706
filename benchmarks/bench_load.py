"""Load: a folder of 2,000 small images, watching memory and open files over time.

Prints resident memory and the number of open file descriptors every 10% of the run, and the
ratio of the last sample to the first after warm-up: a run that leaks grows steadily instead.

    python benchmarks/bench_load.py [--images 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

import actviz
from actviz.api import ImageResult


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Sampler:
    """A reporter that samples memory and descriptors as images complete."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.done = 0
        self.samples: list[tuple[int, float, int, float]] = []
        self.start_time = time.perf_counter()

    def warn(self, message: str) -> None:
        pass

    def start(self, total: int) -> None:
        self.start_time = time.perf_counter()

    def advance(self, result: ImageResult) -> None:
        self.done += 1
        if self.done % self.every == 0:
            elapsed = time.perf_counter() - self.start_time
            self.samples.append((self.done, rss_mib(), open_fds(), elapsed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="actviz-load-", ignore_cleanup_errors=True) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    rng = np.random.default_rng(0)
    for i in range(args.images):
        pixels = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        target = work / "photos" / f"d{i % 20:02d}" / f"{i:05d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(target)
    sampler = Sampler(every=max(1, args.images // 10))
    result = actviz.run(
        args.model,
        [work / "photos"],
        layers="layer4.*",
        out=work / "out",
        weights="none",
        reporter=sampler,
    )
    print(
        f"{args.model}, {args.images} images, --layers 'layer4.*' "
        f"({result.grids_written} PNGs, {len(result.failed)} failed)"
    )
    print("   images   RSS MiB   open fds   seconds")
    for done, rss, fds, elapsed in sampler.samples:
        print(f"   {done:6d}   {rss:7.0f}   {fds:8d}   {elapsed:7.1f}")
    first, last = sampler.samples[1], sampler.samples[-1]  # skip the warm-up sample
    print(f"RSS last/first = {last[1] / first[1]:.3f}; open fds {first[2]} -> {last[2]}")


if __name__ == "__main__":
    main()
