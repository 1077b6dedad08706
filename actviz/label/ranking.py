"""One layer's unit scores ranked once, for every metric and every permutation.

Each unit orders the images by its score, highest first (ties in image order); images with
equal scores form a *tie block*, and a threshold can only fall between blocks, never inside
one. The metrics read these orders: AUPRC and F1 by rank position, Pearson correlation and
AUC from the scores and their average ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Ranked", "rank_units", "subset"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Ranked:
    """A layer's scores ``(N images, U units)`` and what the metrics read of them.

    Attributes:
        scores: ``(N, U)`` the scores, float64.
        order: ``(U, N)`` per unit, the images from its highest score down (ties in image
            order).
        ends: ``(U, N)`` per unit and rank position, the last position of the tie block it
            lies in (a threshold at that position takes the whole block).
        block_unit, block_start, block_end: The tie blocks of more than one image, as three
            arrays of the same length, sorted by unit.
        ranks: ``(N, U)`` each image's average ascending rank (1 = lowest), ties sharing the
            mean of their ranks: what the Mann-Whitney AUC reads.
        centred: ``(N, U)`` the scores minus each unit's mean.
        spread: ``(U,)`` the square root of each unit's sum of squared deviations (0 for a
            constant unit).
    """

    scores: F64
    order: I64
    ends: I64
    block_unit: I64
    block_start: I64
    block_end: I64
    ranks: F64
    centred: F64
    spread: F64

    @property
    def images(self) -> int:
        return int(self.scores.shape[0])

    @property
    def units(self) -> int:
        return int(self.scores.shape[1])

    @property
    def constant(self) -> npt.NDArray[np.bool_]:
        """``(U,)`` units whose score is the same on every image: nothing can label them."""
        constant: npt.NDArray[np.bool_] = self.spread == 0
        return constant


def rank_units(scores: npt.ArrayLike) -> Ranked:
    """Rank ``scores`` ``(N images, U units)`` for the metrics.

    Non-finite scores are refused by the caller; here they would sort arbitrarily.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores must be (images, units), not {s.shape}")
    n, u = s.shape
    # Descending by score, ties in image order: a stable sort of the negated scores.
    order = np.argsort(-s.T, axis=1, kind="stable")
    ranked = np.take_along_axis(s.T, order, axis=1)  # (U, N), non-increasing
    new_block = np.ones((u, n), dtype=bool)
    new_block[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    # The end of each position's block: the next block's start minus one, read backwards.
    last = np.zeros((u, n), dtype=bool)
    last[:, :-1] = new_block[:, 1:]
    last[:, -1] = True
    positions = np.broadcast_to(np.arange(n), (u, n))
    ends = np.where(last, positions, n)
    ends = np.minimum.accumulate(ends[:, ::-1], axis=1)[:, ::-1].astype(np.int64)
    starts = np.where(new_block, positions, 0)
    starts = np.maximum.accumulate(starts, axis=1)
    tied = new_block & (ends > positions)  # the first position of a block of two or more
    block_unit, block_start = np.nonzero(tied)
    block_end = ends[block_unit, block_start]
    # Average ascending ranks: a block at descending positions s..e holds ascending ranks
    # n-e .. n-s, whose mean is n - (s + e) / 2.
    mean_rank = n - (starts + ends) / 2.0  # (U, N) by position
    ranks = np.empty((u, n), dtype=np.float64)
    np.put_along_axis(ranks, order, mean_rank, axis=1)
    centred = s - s.mean(axis=0, keepdims=True)
    spread = np.sqrt((centred**2).sum(axis=0))
    # A unit that is constant up to rounding has no ranking: treated as constant.
    spread = np.where(ends[:, 0] == n - 1, 0.0, spread)
    return Ranked(
        scores=s,
        order=order.astype(np.int64),
        ends=ends,
        block_unit=block_unit.astype(np.int64),
        block_start=block_start.astype(np.int64),
        block_end=block_end.astype(np.int64),
        ranks=ranks.T.copy(),
        centred=centred,
        spread=spread,
    )


def subset(ranked: Ranked, units: npt.ArrayLike) -> Ranked:
    """The same ranking for some of the units only (in the order given)."""
    chosen = np.asarray(units, dtype=np.int64)
    remap = np.full(ranked.units, -1, dtype=np.int64)
    remap[chosen] = np.arange(chosen.size)
    keep = remap[ranked.block_unit] >= 0
    unit = remap[ranked.block_unit[keep]]
    order = np.argsort(unit, kind="stable")  # blocks stay sorted by unit
    return Ranked(
        scores=ranked.scores[:, chosen],
        order=ranked.order[chosen],
        ends=ranked.ends[chosen],
        block_unit=unit[order],
        block_start=ranked.block_start[keep][order],
        block_end=ranked.block_end[keep][order],
        ranks=ranked.ranks[:, chosen],
        centred=ranked.centred[:, chosen],
        spread=ranked.spread[chosen],
    )
