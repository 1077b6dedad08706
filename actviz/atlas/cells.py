"""The layout binned into a grid: each cell's count, mean vector and nearest real points.

As Lucid's ``activation_atlas``: the layout is scaled to the unit square per axis with its
outer 1% on each side clipped (and a margin of 10% of the range), then cut into ``grid x grid``
cells; a cell with fewer than ``min_count`` points is dropped from the atlas (its points stay
in the table and its count in the record). The sums behind the means are float64 on the
device (``index_add_``), so a mean equals the brute-force one to float32 rounding. A cell's
nearest points are the ones of its own whose vectors lie closest to its mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Cells", "bin_points", "normalize_layout"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
#: Percentiles the layout is clipped to before scaling, and the margin added around them.
CLIP = (1.0, 99.0)
MARGIN = 0.1
_CHUNK = 1 << 16


def normalize_layout(xy: npt.NDArray[np.floating[Any]]) -> F32:
    """``(N, 2)`` layout scaled to ``[0, 1]`` per axis, outliers clipped (Lucid's
    ``normalize_layout``)."""
    xy = np.asarray(xy, np.float64)
    if xy.shape[0] == 0:
        return np.zeros((0, 2), np.float32)
    low = np.percentile(xy, CLIP[0], axis=0)
    high = np.percentile(xy, CLIP[1], axis=0)
    span = high - low
    low, high = low - MARGIN * span, high + MARGIN * span
    clipped = np.clip(xy, low, high)
    clipped -= clipped.min(axis=0)
    top = clipped.max(axis=0)
    top[top == 0] = 1.0  # one position on an axis: every point at 0
    scaled: F32 = (clipped / top).astype(np.float32)
    return scaled


@dataclass(frozen=True)
class Cells:
    """The grid's cells.

    Attributes:
        grid: Cells per side.
        min_count: Cells with fewer points were dropped.
        cell: ``(N,)`` each point's cell, ``row * grid + column`` (row 0 at the top).
        counts: ``(grid * grid,)`` points per cell, every cell.
        kept: ``(K,)`` the cells kept, in id order.
        means: ``(K, C)`` float32: each kept cell's mean vector.
        nearest: ``(K, n)`` the points nearest each kept cell's mean, nearest first (-1 where
            the cell has fewer points).
    """

    grid: int
    min_count: int
    cell: I64
    counts: I64
    kept: I64
    means: F32
    nearest: I64

    @property
    def dropped_points(self) -> int:
        """Points that fell in dropped cells."""
        return int(self.counts.sum() - self.counts[self.kept].sum())


def cell_ids(xy01: F32, grid: int) -> I64:
    """Each point's cell in a ``grid x grid`` binning of the unit square (x to the right, y
    down; the right and bottom edges belong to the last cells)."""
    xy = np.asarray(xy01, np.float64)
    column = np.minimum((xy[:, 0] * grid).astype(np.int64), grid - 1)
    row = np.minimum((xy[:, 1] * grid).astype(np.int64), grid - 1)
    ids: I64 = np.clip(row, 0, grid - 1) * grid + np.clip(column, 0, grid - 1)
    return ids


def _work_device(device: Any) -> Any:
    import torch

    device = torch.device(device)
    return torch.device("cpu") if device.type == "mps" else device


def bin_points(
    xy01: F32,
    vectors: F32,
    *,
    grid: int,
    min_count: int,
    nearest: int,
    device: Any = "cpu",
) -> Cells:
    """Bin the points of a unit-square layout and summarize each kept cell."""
    import torch

    work = _work_device(device)
    cell = cell_ids(xy01, grid)
    counts = np.bincount(cell, minlength=grid * grid).astype(np.int64)
    kept = np.flatnonzero(counts >= min_count).astype(np.int64)
    channels = vectors.shape[1]
    sums = torch.zeros((grid * grid, channels), dtype=torch.float64, device=work)
    for start in range(0, len(cell), _CHUNK):
        block = torch.from_numpy(vectors[start : start + _CHUNK]).to(work).double()
        index = torch.from_numpy(cell[start : start + _CHUNK]).to(work)
        sums.index_add_(0, index, block)
    every = sums / torch.from_numpy(np.maximum(counts, 1)).to(work).double()[:, None]
    distance = np.empty(len(cell), np.float64)
    for start in range(0, len(cell), _CHUNK):
        block = torch.from_numpy(vectors[start : start + _CHUNK]).to(work).double()
        index = torch.from_numpy(cell[start : start + _CHUNK]).to(work)
        distance[start : start + _CHUNK] = ((block - every[index]) ** 2).sum(dim=1).cpu().numpy()
    return Cells(
        grid=grid,
        min_count=min_count,
        cell=cell,
        counts=counts,
        kept=kept,
        means=every[torch.from_numpy(kept).to(work)].float().cpu().numpy(),
        nearest=_nearest(cell, distance, kept, nearest),
    )


def _nearest(cell: I64, distance: npt.NDArray[np.float64], kept: I64, count: int) -> I64:
    """Per kept cell, its ``count`` points of least ``distance`` (ties by point order)."""
    order = np.lexsort((np.arange(len(cell)), distance, cell))
    ordered = cell[order]
    starts = np.searchsorted(ordered, kept, side="left")
    ends = np.searchsorted(ordered, kept, side="right")
    result = np.full((len(kept), count), -1, np.int64)
    for j, (start, end) in enumerate(zip(starts, ends, strict=True)):
        picked = order[start : min(end, start + count)]
        result[j, : len(picked)] = picked
    return result
