"""``--view pca`` against a grids-only run of the same folder.

Both are ``actviz.run`` on resnet18 (random weights, the default selection: every
convolution), the same folder and batch size, every grid and the report; the PCA run also
makes its first pass (one more forward over the folder, a sample per layer, the fits) and one
PCA picture per layer and image. Same process, alternating, best of ``--repeat``.

    python benchmarks/bench_pca.py [--images 24] [--repeat 2] [--layers SEL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402

MODEL = "resnet18"


def timed(folder: Path, work: Path, layers: str | None, pca: bool) -> float:
    out = Path(tempfile.mkdtemp(dir=work)) / "out"
    start = time.perf_counter()
    actviz.run(MODEL, [folder], layers=layers, out=out, weights="none", batch_size=8, pca=pca)
    seconds = time.perf_counter() - start
    written = list(out.rglob("*_pca.png"))
    assert bool(written) == pca
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--layers", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="actviz-bench-"))
    folder = make_folder(work / "photos", args.images)
    timed(folder, work, args.layers, False)  # warm-up: imports, allocator, templates
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeat):
        for pca in (False, True):
            times[pca].append(timed(folder, work, args.layers, pca))
    grids, with_pca = min(times[False]), min(times[True])
    what = args.layers or "default selection"
    print(f"{MODEL}, {args.images} photos, {what}, batch 8")
    print(f"    grids only      {grids:6.2f} s")
    print(f"    with --view pca {with_pca:6.2f} s")
    print(f"    ratio {with_pca / grids:.2f}  (target <= 1.3)")


if __name__ == "__main__":
    main()
