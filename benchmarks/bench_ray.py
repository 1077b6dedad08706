"""``actviz stats`` on the Ray engine against the local engine, on this one machine.

The same folder, model and layers through ``actviz.run(..., grids=False)`` (what ``actviz
stats`` runs) with ``engine="local"`` and with ``engine="ray"`` on a pool of actors; each run
includes everything a user waits for (the Ray run: starting a local Ray instance and the actors,
each of which imports torch and builds the model). On one machine Ray can only add overhead;
the figures say how much, per run and per image. Needs the ``ray`` extra.

    python benchmarks/bench_ray.py [--images 400] [--workers 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402

MODEL = "resnet18"


def timed(folder: Path, work: Path, **engine: object) -> float:
    start = time.perf_counter()
    result = actviz.run(
        MODEL,
        [folder],
        layers="conv",
        out=Path(tempfile.mkdtemp(dir=work)),
        weights="none",
        grids=False,
        report=False,
        batch_size=8,
        **engine,
    )
    seconds = time.perf_counter() - start
    assert not result.failed and result.stats is not None
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-ray-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    folder = make_folder(work / "photos", args.images)
    runs: dict[str, list[float]] = {"local": [], "ray": []}
    for _ in range(args.repeat):
        runs["local"].append(timed(folder, work))
        runs["ray"].append(timed(folder, work, engine="ray", workers=args.workers))
    best = {name: min(times) for name, times in runs.items()}
    n = args.images
    print(f"{MODEL}, {n} images, --layers conv, statistics only; best of {args.repeat}")
    print(f"  local            {best['local']:6.1f} s  {n / best['local']:5.1f} images/s")
    print(f"  ray, {args.workers} actors     {best['ray']:6.1f} s  {n / best['ray']:5.1f} images/s")
    print(f"ray / local = {best['ray'] / best['local']:.2f}")
    overhead = (best["ray"] - best["local"]) / n * 1000
    print(f"overhead per image = {overhead:+.1f} ms (start-up included)")


if __name__ == "__main__":
    main()
