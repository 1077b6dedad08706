"""How well a unit's scores over the images match a concept's labels: the metrics as rows.

Each row says what it measures, whether it passes the two sanity checks of NeuronEval
(Oikarinen, Yan and Weng, ICML 2025: the score must fall when half the positive labels are
dropped, and when random extra positives are added), its value for every unit, and its value
for every unit under each permutation of the labels (the permutation test's null), computed
for all units at once.

AUPRC and F1 read the rank positions of the positive images. Under a uniformly random
permutation of the labels, the positions a unit ranks the positives at are a uniformly random
set whatever the unit's order, so one matrix of permuted labels, read as positions, serves as
the null of every unit at once (for each unit it is a permutation test with the permutations
composed with its own order: still uniform, still independent). Ties are exact: a threshold
takes a whole tie block, as scikit-learn's ``average_precision_score`` does, so a constant unit
scores the same under every permutation and its p-value is 1. Pearson correlation and AUC are
one matrix product of the permuted labels with the centred scores (or their average ranks).

Written here rather than called from scikit-learn, which the tests check every metric against:
its ``average_precision_score`` takes about 3 ms a call on this project's machine
(``benchmarks/bench_label.py``), and 512 units, 20 concepts and 1,000 permutations are ten
million calls, nine hours; these rows score every unit under every permutation at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from actviz.errors import UsageError
from actviz.label.ranking import Ranked, rank_units

__all__ = ["METRICS", "Metric", "chance", "metric", "relabelled_drop"]

F64 = npt.NDArray[np.float64]
Labels = npt.NDArray[np.bool_]
#: Permuted label rows multiplied at once: bounds memory at this many floats per array.
_CELLS = 1 << 22


@dataclass(frozen=True)
class Metric:
    """One way to score a unit against a concept.

    Attributes:
        name: Its name on the command line and in files (``auprc``).
        title: How pages and tables show it.
        sane: Whether it passes both sanity checks (missing and extra labels).
        note: One line on why it passes or fails them.
        observe: ``(ranked, labels (N,), fire)`` -> ``(U,)`` the value of every unit.
        null: ``(ranked, permuted (M, N), fire)`` -> ``(M, U)`` every unit's value under
            each permuted labelling (rows: permutations).
        chance: ``(images, positives, fire)`` -> what a unit unrelated to the concept
            scores on average.
    """

    name: str
    title: str
    sane: bool
    note: str
    observe: Callable[[Ranked, Labels, float], F64]
    null: Callable[[Ranked, Labels, float], F64]
    chance: Callable[[int, int, float], float]


def _fired(ranked: Ranked, fire: float) -> npt.NDArray[np.int64]:
    """Per unit, the last rank position it fires at: its top ``fire`` share of the images,
    the whole tie block at the threshold included."""
    n = ranked.images
    t = max(0, min(n - 1, int(np.ceil(fire * n)) - 1))
    return ranked.ends[:, t]


def _padded_cumsum(z: npt.NDArray[np.float64]) -> F64:
    """Row-wise cumulative sums with a leading 0 column: ``out[:, j]`` sums ``z[:, :j]``."""
    out = np.zeros((z.shape[0], z.shape[1] + 1), dtype=np.float64)
    np.cumsum(z, axis=1, out=out[:, 1:])
    return out


def _precision_terms(z: npt.NDArray[np.float64]) -> tuple[F64, F64]:
    """For labels read in rank order (rows), the padded cumulative positives and the padded
    cumulative sum of precision at each positive: untied, average precision is the latter's
    last column over the positives."""
    cz = _padded_cumsum(z)
    positions = np.arange(1, z.shape[1] + 1, dtype=np.float64)
    return cz, _padded_cumsum(z * cz[:, 1:] / positions)


def _tie_terms(cz: F64, cg: F64, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]) -> F64:
    """What a tie block ``start..end`` changes in the sum of precisions: its positives count
    once, at the precision of the block's end, instead of one by one."""
    inside = cz[..., end + 1] - cz[..., start]
    return inside * cz[..., end + 1] / (end + 1) - (cg[..., end + 1] - cg[..., start])


def _auprc_observe(ranked: Ranked, y: Labels, fire: float) -> F64:
    z = y[ranked.order].astype(np.float64)  # (U, N): each unit's labels in its order
    cz, cg = _precision_terms(z)
    total = cg[:, -1].copy()
    if ranked.block_unit.size:
        rows, start, end = ranked.block_unit, ranked.block_start, ranked.block_end
        inside = cz[rows, end + 1] - cz[rows, start]
        terms = inside * cz[rows, end + 1] / (end + 1) - (cg[rows, end + 1] - cg[rows, start])
        total += np.bincount(rows, terms, minlength=ranked.units)
    positives = max(int(y.sum()), 1)
    result: F64 = total / positives
    return result


def _auprc_null(ranked: Ranked, permuted: Labels, fire: float) -> F64:
    z = permuted.astype(np.float64)  # (M, N): read as rank positions, see the module doc
    cz, cg = _precision_terms(z)
    positives = max(int(permuted[0].sum()), 1)
    out = np.repeat(cg[:, -1:], ranked.units, axis=1)
    blocks = ranked.block_unit.size
    step = max(1, _CELLS // max(z.shape[0], 1))
    for first in range(0, blocks, step):
        unit = ranked.block_unit[first : first + step]
        terms = _tie_terms(
            cz, cg, ranked.block_start[first : first + step], ranked.block_end[first : first + step]
        )  # (M, blocks in this chunk)
        units, starts = np.unique(unit, return_index=True)
        out[:, units] += np.add.reduceat(terms, starts, axis=1)
    result: F64 = out / positives
    return result


def _f1_observe(ranked: Ranked, y: Labels, fire: float) -> F64:
    last = _fired(ranked, fire)
    z = y[ranked.order]
    tp = np.cumsum(z, axis=1)[np.arange(ranked.units), last].astype(np.float64)
    result: F64 = 2 * tp / (int(y.sum()) + last + 1)
    return result


def _f1_null(ranked: Ranked, permuted: Labels, fire: float) -> F64:
    last = _fired(ranked, fire)
    cz = np.cumsum(permuted, axis=1, dtype=np.int64)
    tp = cz[:, last].astype(np.float64)  # (M, U)
    result: F64 = 2 * tp / (int(permuted[0].sum()) + last + 1)
    return result


def _f1_chance(n: int, p: int, fire: float) -> float:
    fired = max(1, min(n, int(np.ceil(fire * n))))
    return 2 * fired * p / n / (p + fired) if p else 0.0


def _pearson_rows(ranked: Ranked, z: Labels) -> F64:
    """Pearson correlation of each row of labels with every unit: ``(rows, U)``."""
    p = float(z[0].sum())
    n = ranked.images
    label_spread = np.sqrt(p * (1 - p / n))
    out = np.zeros((z.shape[0], ranked.units), dtype=np.float64)
    varying = ~ranked.constant
    if label_spread == 0 or not varying.any():
        return out
    # Centred scores sum to zero, so the labels need no centring: one matrix product.
    products = _matmul_rows(z, ranked.centred[:, varying])
    out[:, varying] = products / (label_spread * ranked.spread[varying])
    return out


def _matmul_rows(z: Labels, right: F64) -> F64:
    """``z @ right`` in blocks of rows, float64."""
    rows = max(1, _CELLS // max(z.shape[1], 1))
    out = np.empty((z.shape[0], right.shape[1]), dtype=np.float64)
    for first in range(0, z.shape[0], rows):
        out[first : first + rows] = z[first : first + rows].astype(np.float64) @ right
    return out


def _pearson_observe(ranked: Ranked, y: Labels, fire: float) -> F64:
    result: F64 = _pearson_rows(ranked, y[None, :])[0]
    return result


def _pearson_null(ranked: Ranked, permuted: Labels, fire: float) -> F64:
    return _pearson_rows(ranked, permuted)


def _auc_rows(ranked: Ranked, z: Labels) -> F64:
    p = int(z[0].sum())
    negatives = ranked.images - p
    if p == 0 or negatives == 0:
        return np.full((z.shape[0], ranked.units), 0.5)
    sums = _matmul_rows(z, ranked.ranks)
    result: F64 = (sums - p * (p + 1) / 2) / (p * negatives)
    return result


def _auc_observe(ranked: Ranked, y: Labels, fire: float) -> F64:
    result: F64 = _auc_rows(ranked, y[None, :])[0]
    return result


def _auc_null(ranked: Ranked, permuted: Labels, fire: float) -> F64:
    return _auc_rows(ranked, permuted)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "auprc",
            "AUPRC",
            True,
            "average precision of the unit's ranking: falls when positives are dropped (they "
            "rank high as negatives) and when random ones are added (they rank low)",
            _auprc_observe,
            _auprc_null,
            lambda n, p, fire: p / n if n else 0.0,
        ),
        Metric(
            "f1",
            "F1",
            True,
            "F1 of the unit firing (its top --fire share of the images) against the concept: "
            "reliable when the concept's share of the images is near --fire",
            _f1_observe,
            _f1_null,
            _f1_chance,
        ),
        Metric(
            "pearson",
            "Pearson r",
            True,
            "correlation of the unit's scores with the 0/1 labels",
            _pearson_observe,
            _pearson_null,
            lambda n, p, fire: 0.0,
        ),
        Metric(
            "auc",
            "AUC",
            False,
            "fails the missing-labels check: for a rare concept, positives turned into "
            "negatives hardly move it (it normalises by the many negatives)",
            _auc_observe,
            _auc_null,
            lambda n, p, fire: 0.5,
        ),
    )
}
"""Every image-level metric, by name. IoU, the pixel-level metric of ``--masks``, is computed
from the masks in :mod:`actviz.label.masks`."""


def metric(name: str) -> Metric:
    """The metric called ``name``.

    Raises:
        UsageError: For an unknown name, listing the known ones.
    """
    found = METRICS.get(str(name).strip().lower())
    if found is None:
        raise UsageError(f"--metric {name!r} is not a metric: use {', '.join(METRICS)}")
    return found


def chance(name: str, images: int, positives: int, fire: float) -> float:
    """What a unit unrelated to a concept of ``positives`` among ``images`` scores on
    average by metric ``name``."""
    return METRICS[name].chance(images, positives, fire)


def relabelled_drop(
    name: str,
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    fire: float = 0.1,
    seed: int = 0,
) -> dict[str, float]:
    """The two sanity checks of one metric on one unit: how far its score falls, as a share of
    the way from the score down to chance, when half the positive labels are dropped
    (``missing``) and when as many random extra positives as there were are added
    (``extra``). A metric that passes falls by a clear share under both.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(labels, dtype=bool)
    rng = np.random.default_rng(seed)
    ranked = rank_units(s)
    row = METRICS[name]
    p = int(y.sum())
    positives = np.flatnonzero(y)
    negatives = np.flatnonzero(~y)
    missing = y.copy()
    missing[rng.choice(positives, size=p // 2, replace=False)] = False
    extra = y.copy()
    extra[rng.choice(negatives, size=min(p, negatives.size), replace=False)] = True
    base = float(row.observe(ranked, y, fire)[0])
    out = {}
    for check, relabelled in (("missing", missing), ("extra", extra)):
        floor = row.chance(y.size, int(relabelled.sum()), fire)
        value = float(row.observe(ranked, relabelled, fire)[0])
        out[check] = (base - value) / (base - floor) if base != floor else 0.0
    return out
