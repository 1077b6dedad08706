"""From vectors to a 2-D layout: PCA on the model's device, then a reducer (a row of
:data:`REDUCERS`: UMAP, or the first two principal components); and the ridge map that puts a
second model's vectors into the first's space.

PCA is exact: the covariance of the centred vectors is accumulated in float64 on the device a
chunk at a time and diagonalised (``torch.linalg.eigh``, ``C x C``), so the same vectors give
the same components on any run (a randomized PCA such as ``torch.pca_lowrank`` would draw from
torch's global generator). Each component's sign is fixed (its largest loading positive).
Reducing to about 50 dimensions first is what UMAP's authors advise for wide vectors, and
centring avoids the trap of unnormalised embeddings (TensorBoard's projector, #6271).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

    from actviz.atlas.options import AtlasOptions

__all__ = ["REDUCERS", "Pca", "Reducer", "fit_pca", "reducer", "ridge_map"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
#: Rows sent to the device at a time.
CHUNK = 1 << 16


@dataclass(frozen=True)
class Pca:
    """Principal components of a set of vectors.

    Attributes:
        mean: ``(C,)`` the vectors' mean.
        components: ``(d, C)`` unit rows, by decreasing variance.
        variance: ``(d,)`` the variance along each.
        total: The total variance (the trace of the covariance).
        coords: ``(N, d)`` float32: the vectors in the components' coordinates.
    """

    mean: F64
    components: F64
    variance: F64
    total: float
    coords: F32

    @property
    def explained(self) -> list[float]:
        """The share of the total variance each component explains."""
        total = self.total if self.total > 0 else 1.0
        return [float(v) / total for v in self.variance]


def _work_device(device: Any) -> torch.device:
    """Where float64 sums run: the model's device, except Apple's (no float64 there)."""
    import torch

    device = torch.device(device)
    return torch.device("cpu") if device.type == "mps" else device


def fit_pca(vectors: F32, dims: int, device: Any = "cpu") -> Pca:
    """PCA of ``(N, C)`` vectors to at most ``dims`` components, on ``device``."""
    import torch

    work = _work_device(device)
    count, channels = vectors.shape
    mean = torch.zeros(channels, dtype=torch.float64, device=work)
    for start in range(0, count, CHUNK):
        mean += torch.from_numpy(vectors[start : start + CHUNK]).to(work).double().sum(dim=0)
    mean /= max(count, 1)
    cov = torch.zeros((channels, channels), dtype=torch.float64, device=work)
    for start in range(0, count, CHUNK):
        block = torch.from_numpy(vectors[start : start + CHUNK]).to(work).double() - mean
        cov += block.T @ block
    cov /= max(count - 1, 1)
    values, vecs = torch.linalg.eigh(cov)  # ascending
    keep = max(1, min(dims, channels, max(count - 1, 1)))
    values = values.flip(0)[:keep].clamp_min(0)
    components = vecs.flip(1)[:, :keep].T.contiguous()  # (d, C)
    # A component's sign is arbitrary: its largest loading made positive, so runs agree.
    biggest = components.abs().argmax(dim=1)
    signs = torch.sign(components[torch.arange(keep, device=work), biggest])
    components *= torch.where(signs == 0, torch.ones_like(signs), signs)[:, None]
    coords = np.empty((count, keep), np.float32)
    for start in range(0, count, CHUNK):
        block = torch.from_numpy(vectors[start : start + CHUNK]).to(work).double() - mean
        coords[start : start + CHUNK] = (block @ components.T).float().cpu().numpy()
    return Pca(
        mean=mean.cpu().numpy(),
        components=components.cpu().numpy(),
        variance=values.cpu().numpy(),
        total=float(torch.trace(cov)),
        coords=coords,
    )


@dataclass(frozen=True)
class Reducer:
    """One way to lay the PCA coordinates out in 2-D.

    Attributes:
        name: ``--reduce``'s value.
        fewest: Fewest points it needs, given the options.
        layout: ``(coords (N, d), options) -> (N, 2)`` float32.
        words: What it did, for the record.
    """

    name: str
    fewest: Callable[[AtlasOptions], int]
    layout: Callable[[F32, AtlasOptions], F32]
    words: Callable[[AtlasOptions], str]


def _pca_layout(coords: F32, opts: AtlasOptions) -> F32:
    xy = np.zeros((coords.shape[0], 2), np.float32)
    xy[:, : min(2, coords.shape[1])] = coords[:, :2]
    return xy


def _umap_layout(coords: F32, opts: AtlasOptions) -> F32:
    """UMAP with a fixed ``random_state`` (which makes umap-learn run in one thread, so the
    same seed gives the same layout)."""
    import umap  # the atlas extra; checked when the options were built

    with warnings.catch_warnings():
        # It says it runs single-threaded for a fixed seed: that is why the seed is fixed.
        warnings.simplefilter("ignore")
        fitted = umap.UMAP(
            n_components=2,
            n_neighbors=opts.neighbors,
            min_dist=0.1,
            metric="euclidean",
            random_state=opts.seed,
        ).fit_transform(coords)
    return np.asarray(fitted, np.float32)


REDUCERS: dict[str, Reducer] = {
    r.name: r
    for r in (
        Reducer(
            "umap",
            fewest=lambda opts: opts.neighbors + 1,
            layout=_umap_layout,
            words=lambda opts: (
                f"UMAP of the PCA coordinates (umap-learn, n_neighbors {opts.neighbors}, "
                f"min_dist 0.1, euclidean, random_state {opts.seed})"
            ),
        ),
        Reducer(
            "pca",
            fewest=lambda opts: 3,
            layout=_pca_layout,
            words=lambda opts: "the first two principal components",
        ),
    )
}


def reducer(name: str) -> Reducer:
    """The row of ``--reduce``."""
    try:
        return REDUCERS[name]
    except KeyError:
        raise UsageError(f"--reduce takes {' or '.join(REDUCERS)}, not '{name}'") from None


def check_enough(points: int, opts: AtlasOptions, what: str) -> None:
    """Refuse fewer points than the layout needs, naming the ways to get more.

    Raises:
        UsageError: With the count, the need and the fixes.
    """
    need = reducer(opts.reduce).fewest(opts)
    if points >= need:
        return
    fixes = "give more images"
    if opts.points.kind == "pooled":
        fixes += ", take several points per image (--points spatial:4)"
    if opts.reduce == "umap":
        fixes += f", lower --neighbors (now {opts.neighbors}) or pass --reduce pca"
    raise UsageError(
        f"{what} give {points} point(s), and --reduce {opts.reduce} needs at least {need}; {fixes}"
    )


@dataclass(frozen=True)
class RidgeMap:
    """Model B's vectors mapped into model A's space.

    Attributes:
        mapped: ``(N, C_A)`` float32.
        penalty: The ridge penalty used (absolute).
        r2: The share of A's variance the map explains on these vectors.
    """

    mapped: F32
    penalty: float
    r2: float


def ridge_map(b: F32, a: F32, relative: float, device: Any = "cpu") -> RidgeMap:
    """The ridge regression from ``b`` (N, C_B) onto ``a`` (N, C_A), fitted on these same
    rows (the same images through both models) with a penalty of ``relative`` times B's mean
    variance per channel, and ``b`` mapped through it."""
    import torch

    work = _work_device(device)
    xb = torch.from_numpy(b).to(work).double()
    xa = torch.from_numpy(a).to(work).double()
    mb, ma = xb.mean(dim=0), xa.mean(dim=0)
    xb, xa = xb - mb, xa - ma
    gram = xb.T @ xb
    penalty = float(relative * torch.trace(gram) / max(gram.shape[0], 1))
    eye = torch.eye(gram.shape[0], dtype=torch.float64, device=work)
    weight = torch.linalg.solve(gram + max(penalty, 1e-12) * eye, xb.T @ xa)
    fitted = xb @ weight
    residual = float(((fitted - xa) ** 2).sum())
    total = float((xa**2).sum())
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return RidgeMap((fitted + ma).float().cpu().numpy(), penalty, r2)
