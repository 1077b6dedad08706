"""The HTML report at scale: its peak memory over a 10x bigger folder run, in one process.

The report of a streamed folder run reads the images' rows a page at a time and hands its files
to the caller one by one, so its memory must not grow with the images. A synthetic run (the one
the report tests use, ``tests/scale_run.py``: three layers, a dead ReLU every 97th image, NaN
every 331st, a failure every 500th) of a small and a 10x bigger size goes through
``build_report``; the peak of Python's traced allocations while its files are made is compared
(target: the big run's peak at most 1.2x the small one's). A warm-up run first compiles the
templates and fills the caches, so neither side pays for them.

    python benchmarks/bench_report.py                  # 2,000 vs 20,000 images
    python benchmarks/bench_report.py --sizes 200,2000
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the synthetic run lives beside the tests

from actviz.report.pages import LINKED_FIRST, PAGE_ROWS, build_report  # noqa: E402
from tests.scale_run import SCALE_LAYERS, expected_files, make_large_run  # noqa: E402

PEAK_TARGET = 1.2


def measure(count: int) -> tuple[int, int, float]:
    """The report of a ``count``-image run: (peak traced bytes, files, seconds)."""
    manifest, stats, images = make_large_run(None, count)
    expected = expected_files(images)
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    start = time.perf_counter()
    files = sum(1 for _ in build_report(manifest, stats, images, out_dir_name="out"))
    seconds = time.perf_counter() - start
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if files != expected:
        raise SystemExit(f"the report of {count} images made {files} files, not {expected}")
    # Beside the index pages: at most a page and a chart per linked image, a page per layer.
    bound = 2 * (LINKED_FIRST + 2 * 10) + len(SCALE_LAYERS) + 1
    if files - count // PAGE_ROWS > bound:
        raise SystemExit(f"the report of {count} images made {files} files, over the bound")
    return top - before, files, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000", help="small,big image counts")
    args = parser.parse_args()
    small, big = (int(x) for x in args.sizes.split(","))
    measure(max(1, small // 3))  # templates compiled, caches warm
    rows = {n: measure(n) for n in (small, big)}
    for n, (peak, files, seconds) in rows.items():
        print(f"  {n:6d} images: peak {peak / 2**20:7.2f} MiB, {files} files, {seconds:.1f} s")
    ratio = rows[big][0] / rows[small][0]
    verdict = "ok" if ratio <= PEAK_TARGET else "OVER"
    print(
        f"report peak memory, {big} vs {small} images: {ratio:.3f}x "
        f"(target <= {PEAK_TARGET}) {verdict}"
    )


if __name__ == "__main__":
    main()
