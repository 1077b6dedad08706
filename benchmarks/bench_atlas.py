"""actviz atlas: the layout beyond the forward pass, and the forward part against ``stats``.

- layout: 20,000 points of 512 dimensions (sixteen planted clusters, as a layer's pooled
  vectors would hold classes), laid out as ``actviz atlas`` does after its forward part: PCA to
  50 dimensions, UMAP with a fixed seed, the unit-square scaling and a 20 x 20 grid of cells
  with each cell's mean and nearest points. Warm: a 5,000-point UMAP fit first compiles
  umap-learn's numba code, pynndescent's included (that compile is said apart). The baseline
  in the same process: umap-learn on the raw 512 dimensions, as a script would call it
  (``--no-baseline`` leaves it out). Target: under 60 s on 2 cores.
- forward: ``actviz atlas`` and ``actviz stats`` (``run`` without grids) on the same folder,
  model and layer (resnet18 ``layer4``, random weights), each pass timed from its progress
  start to its last image (the model's loading and planning left out of both), alternated
  ``--repeat`` times; the medians and their ratio. Target: at most 1.1x.

    python benchmarks/bench_atlas.py [--points 20000] [--dims 512] [--images 200]
        [--repeat 3] [--spatial 0] [--no-baseline]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402
from actviz.atlas.cells import bin_points, normalize_layout  # noqa: E402
from actviz.atlas.options import PCA_DIMS, AtlasOptions  # noqa: E402
from actviz.atlas.reduce import fit_pca, reducer  # noqa: E402

MODEL, LAYER, BATCH = "resnet18", "layer4", 16


def planted(points: int, dims: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(16, dims)) * 3
    labels = rng.integers(0, 16, points)
    return (centres[labels] + rng.normal(size=(points, dims))).astype(np.float32)


def layout_seconds(vectors: np.ndarray) -> dict[str, float]:
    """actviz's steps after the forward part, each timed."""
    opts = AtlasOptions(layer=LAYER, reduce="umap", seed=0)
    times: dict[str, float] = {}
    started = time.perf_counter()
    pca = fit_pca(vectors, PCA_DIMS, "cpu")
    times["pca"] = time.perf_counter() - started
    started = time.perf_counter()
    raw = reducer("umap").layout(pca.coords, opts)
    times["umap"] = time.perf_counter() - started
    started = time.perf_counter()
    xy = normalize_layout(raw)
    bin_points(xy, vectors, grid=20, min_count=3, nearest=3)
    times["cells"] = time.perf_counter() - started
    times["total"] = sum(times.values())
    return times


def baseline_seconds(vectors: np.ndarray) -> float:
    """umap-learn on the raw vectors, as a script calls it."""
    import warnings

    import umap

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        umap.UMAP(random_state=0).fit_transform(vectors)
    return time.perf_counter() - started


class Span:
    """A reporter that keeps when the pass started and when its last image was done."""

    def __init__(self) -> None:
        self.started = self.ended = 0.0

    def warn(self, message: str) -> None:
        pass

    def start(self, total: int) -> None:
        self.started = time.perf_counter()

    def advance(self, result: Any) -> None:
        self.ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def forward_seconds(folder: Path, out: Path, command: str, spatial: int) -> float:
    span = Span()
    common: dict[str, Any] = {"weights": "none", "batch_size": BATCH, "out": out}
    if command == "stats":
        actviz.run(
            MODEL, [folder], layers=LAYER, grids=False, report=False, reporter=span, **common
        )
    else:
        points = f"spatial:{spatial}" if spatial else "pooled"
        actviz.atlas(
            MODEL, [folder], layer=LAYER, points=points, reduce="pca", reporter=span, **common
        )
    return span.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20000)
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spatial", type=int, default=0, help="K of spatial:K (0: pooled)")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}")

    started = time.perf_counter()
    # Past 4,096 points umap-learn finds neighbours with pynndescent, whose numba code compiles
    # on its first use: a smaller warm-up would leave that compile inside the timed layout.
    layout_seconds(planted(5000, 64, seed=1))
    print(f"warm-up (numba compile and a 5,000-point fit): {time.perf_counter() - started:.1f} s")
    vectors = planted(args.points, args.dims)
    times = layout_seconds(vectors)
    print(
        f"layout of {args.points:,} x {args.dims}: {times['total']:.1f} s (PCA "
        f"{times['pca']:.2f} s, UMAP {times['umap']:.1f} s, cells {times['cells']:.2f} s); "
        "target under 60 s"
    )
    if not args.no_baseline:
        base = baseline_seconds(vectors)
        print(
            f"umap-learn on the raw {args.dims} dimensions: {base:.1f} s; actviz's layout "
            f"{times['total'] / base:.2f}x its time"
        )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = make_folder(root / "photos", args.images)
        runs: dict[str, list[float]] = {"stats": [], "atlas": []}
        for r in range(args.repeat):
            for command in ("stats", "atlas"):
                out = root / f"{command}{r}"
                runs[command].append(forward_seconds(folder, out, command, args.spatial))
        stats_s, atlas_s = (statistics.median(runs[c]) for c in ("stats", "atlas"))
    what = f"spatial:{args.spatial}" if args.spatial else "pooled"
    print(
        f"forward over {args.images} photos, {MODEL} {LAYER}, batch {BATCH}: stats "
        f"{stats_s:.2f} s, atlas ({what}) {atlas_s:.2f} s (medians of {args.repeat}; runs "
        f"stats {', '.join(f'{s:.2f}' for s in runs['stats'])}, atlas "
        f"{', '.join(f'{s:.2f}' for s in runs['atlas'])}): {atlas_s / stats_s:.3f}x; "
        "target at most 1.1x"
    )


if __name__ == "__main__":
    main()
