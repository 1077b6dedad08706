"""Whether a unit's score for a concept beats chance: a permutation test of every unit against
every concept at once, and the Benjamini-Hochberg correction across them.

The labels of a concept are permuted as a matrix (one row per permutation, the same
permutations for every concept, drawn from the seed), each metric scores every unit under
every row at once (:mod:`actviz.label.metrics`), and the p-value of a unit is the share of
permutations that score it at least as high as the real labels, counting the real labels
once: ``(1 + exceed) / (1 + permutations)``, never 0.

Sequential: with ``m`` tests, Benjamini-Hochberg needs a p-value of ``alpha / m`` for a
single discovery, and 1,000 permutations cannot go below 1/1001; 512 units and 20 concepts
are 10,240 tests. So after the first round, the tests that no permutation has reached and that
are not yet discoveries get ten times more permutations (only those units, only those
concepts), round after round, up to ``2 m / alpha`` in all; each p-value counts every
permutation it saw. A test stops as soon as one permutation reaches it: the probability of
stopping with none reaching it, after ``M`` permutations, is ``1 / (1 + M)`` under the null, so
the p-values stay valid (Besag and Clifford's sequential argument). A unit no permutation of
a concept comes near is where all the extra work goes: units far from every concept stop after
the first round.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from actviz.label.metrics import Metric
from actviz.label.ranking import Ranked, subset

__all__ = ["Permuted", "benjamini_hochberg", "permutation_rows", "permutation_test", "round_cap"]

F64 = npt.NDArray[np.float64]
#: Scores within this of the real labels' count as reaching it: the same position pattern
#: can come out of a different order of float additions.
TOLERANCE = 1e-9
_CELLS = 1 << 22
#: Each round gives the tests still open this many times the permutations they saw.
GROWTH = 10


@dataclass(frozen=True, eq=False)
class Permuted:
    """The permutation test of every unit and concept of a layer.

    Attributes:
        p: ``(U, K)`` p-values (NaN where the concept is not tested).
        permutations: ``(U, K)`` how many permutations each p-value counts.
        null_mean: ``(U, K)`` the mean of each null over the first round.
        cap: The most permutations a test could get.
    """

    p: F64
    permutations: npt.NDArray[np.int64]
    null_mean: F64
    cap: int


def round_cap(tests: int, alpha: float, permutations: int) -> int:
    """The most permutations a test may get: enough for one discovery among ``tests`` at
    false-discovery rate ``alpha`` (``2 tests / alpha``), never fewer than ``permutations``."""
    return max(permutations, math.ceil(2 * max(tests, 1) / alpha))


def _block_rows(images: int) -> int:
    return max(1, _CELLS // max(images, 1))


def permutation_rows(
    images: int, permutations: int, seed: int, start: int = 0
) -> Iterator[npt.NDArray[np.intp]]:
    """Permutations ``start`` to ``start + permutations`` of ``images`` indices, as
    ``(rows, images)`` blocks of a few million cells: permutation ``i`` is the same in every
    call with the same ``images`` and ``seed``."""
    rows = _block_rows(images)
    base = np.arange(images)
    stop = start + permutations
    block = start // rows
    while block * rows < stop:
        rng = np.random.default_rng([seed, block])
        first, last = max(start, block * rows), min(stop, (block + 1) * rows)
        whole = rng.permuted(np.broadcast_to(base, (rows, images)), axis=1)
        yield whole[first - block * rows : last - block * rows]
        block += 1


def _count(
    ranked: Ranked,
    column: npt.NDArray[np.bool_],
    observed: F64,
    row: Metric,
    start: int,
    count: int,
    seed: int,
    fire: float,
) -> tuple[npt.NDArray[np.int64], F64]:
    """Per unit of ``ranked``, how many of permutations ``start`` .. ``start + count`` score
    it at least ``observed``, and the sum of their scores."""
    exceed = np.zeros(ranked.units, dtype=np.int64)
    total = np.zeros(ranked.units, dtype=np.float64)
    for perms in permutation_rows(ranked.images, count, seed, start):
        null = row.null(ranked, column[perms], fire)  # (rows, U)
        exceed += (null >= observed - TOLERANCE).sum(axis=0)
        total += null.sum(axis=0)
    return exceed, total


def permutation_test(
    ranked: Ranked,
    labels: npt.NDArray[np.bool_],
    observed: F64,
    row: Metric,
    *,
    permutations: int,
    seed: int,
    fire: float,
    alpha: float = 0.05,
    cap: int | None = None,
    testable: npt.NDArray[np.bool_] | None = None,
) -> Permuted:
    """P-values of every unit for every concept, sequentially (see the module's doc).

    Args:
        ranked: The layer's ranked scores (N images, U units).
        labels: ``(N, K)`` the concepts' labels.
        observed: ``(U, K)`` the metric's value with the real labels.
        row: The metric.
        permutations: The first round's permutations, for every test.
        seed: Seed of the permutations.
        fire: The share of images a unit fires on (F1).
        alpha: The false-discovery rate that decides which tests go on.
        cap: The most permutations a test may get; None: :func:`round_cap`. Give
            ``permutations`` for a single round.
        testable: ``(K,)`` the concepts to test; the others get NaN.
    """
    _, k = labels.shape
    units = ranked.units
    chosen = np.ones(k, dtype=bool) if testable is None else np.asarray(testable, dtype=bool)
    tests = int(chosen.sum()) * units
    cap = round_cap(tests, alpha, permutations) if cap is None else max(cap, permutations)
    exceed = np.zeros((units, k), dtype=np.int64)
    used = np.zeros((units, k), dtype=np.int64)
    mean = np.full((units, k), np.nan)
    for c in np.flatnonzero(chosen):
        hits, total = _count(ranked, labels[:, c], observed[:, c], row, 0, permutations, seed, fire)
        exceed[:, c], used[:, c], mean[:, c] = hits, permutations, total / permutations
    done = permutations
    while done < cap:
        p = np.where(chosen[None, :], (1.0 + exceed) / (1.0 + used), np.nan)
        q = benjamini_hochberg(p)
        open_ = chosen[None, :] & (exceed == 0) & (q > alpha)
        if not open_.any():
            break
        more = min(cap, done * GROWTH) - done
        for c in np.flatnonzero(open_.any(axis=0)):
            rows = np.flatnonzero(open_[:, c])
            part = subset(ranked, rows)
            hits, _ = _count(part, labels[:, c], observed[rows, c], row, done, more, seed, fire)
            exceed[rows, c] += hits
            used[rows, c] += more
        done += more
    p = np.where(chosen[None, :], (1.0 + exceed) / (1.0 + used), np.nan)
    return Permuted(p=p, permutations=used, null_mean=mean, cap=cap)


def benjamini_hochberg(p: F64) -> F64:
    """Benjamini-Hochberg adjusted p-values (q-values) of every finite entry of ``p``, over
    all of them together; NaN stays NaN. A unit and concept with ``q <= alpha`` is a
    discovery at false-discovery rate ``alpha``."""
    flat = np.asarray(p, dtype=np.float64).ravel()
    q = np.full(flat.shape, np.nan)
    valid = np.flatnonzero(np.isfinite(flat))
    m = valid.size
    if m == 0:
        return q.reshape(np.shape(p))
    order = valid[np.argsort(flat[valid], kind="stable")]
    scaled = flat[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    q[order] = np.minimum(adjusted, 1.0)
    return q.reshape(np.shape(p))
