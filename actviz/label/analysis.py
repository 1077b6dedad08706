"""From one layer's scores to its labels: every metric's value for every unit and concept, the
permutation test of the chosen one, Benjamini-Hochberg across the layer's units and concepts,
and per unit its labels (at most ``top``, best first) or none: "unlabelled" is an answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.label.metrics import METRICS
from actviz.label.options import LabelOptions
from actviz.label.ranking import rank_units
from actviz.label.significance import benjamini_hochberg, permutation_test

__all__ = ["LayerLabels", "analyse_layer", "clean_scores", "testable_concepts"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class LayerLabels:
    """One layer's labels.

    Attributes:
        key: The capture key.
        units: How many units (channels, or a dictionary's features).
        metric: What ranks the labels: the chosen metric, or ``iou`` with masks.
        values: Metric name -> ``(U, K)`` every unit's value for every concept.
        p: ``(U, K)`` permutation p-values of the chosen metric (NaN: concept not tested).
        q: ``(U, K)`` Benjamini-Hochberg q-values over the layer.
        null_mean: ``(U, K)`` the mean of each null (over the first round).
        permutations: ``(U, K)`` the permutations each p-value counts.
        cap: The most permutations a test could get.
        labelled: ``(U, K)`` the units and concepts that are labels.
        records: Per unit, its record in ``labels.json``.
        nonfinite: Scores that were NaN or infinite (ranked lowest or highest).
    """

    key: str
    units: int
    metric: str
    values: dict[str, F64]
    p: F64
    q: F64
    null_mean: F64
    permutations: npt.NDArray[np.int64]
    cap: int
    labelled: npt.NDArray[np.bool_]
    records: list[dict[str, Any]]
    nonfinite: int

    @property
    def labelled_units(self) -> int:
        """How many units have at least one label."""
        return int(self.labelled.any(axis=1).sum())


def testable_concepts(labels: npt.NDArray[np.bool_], least: int) -> list[str | None]:
    """Per concept, why it cannot be tested (too few positive or negative images), or None."""
    n = labels.shape[0]
    out: list[str | None] = []
    for positives in labels.sum(axis=0).tolist():
        if positives < least:
            out.append(f"{positives} positive image(s), fewer than --min-positives {least}")
        elif n - positives < least:
            out.append(f"{n - positives} negative image(s), fewer than --min-positives {least}")
        else:
            out.append(None)
    return out


def clean_scores(scores: npt.ArrayLike) -> tuple[F64, int]:
    """The scores with NaN ranked lowest and infinities at each unit's finite extremes, and
    how many were not finite."""
    s = np.array(scores, dtype=np.float64)
    bad = ~np.isfinite(s)
    count = int(bad.sum())
    if not count:
        return s, 0
    finite = np.where(bad, np.nan, s)
    low = np.nan_to_num(np.nanmin(finite, axis=0), nan=0.0)
    high = np.nan_to_num(np.nanmax(finite, axis=0), nan=0.0)
    s = np.where(np.isnan(s) | (s == -np.inf), low[None, :] - 1.0, s)
    s = np.where(s == np.inf, high[None, :] + 1.0, s)
    return s, count


def analyse_layer(
    key: str,
    scores: npt.ArrayLike,
    labels: npt.NDArray[np.bool_],
    names: Sequence[str],
    untestable: Sequence[str | None],
    opts: LabelOptions,
    *,
    iou: F64 | None = None,
    sheets: Sequence[str | None] | None = None,
) -> LayerLabels:
    """Label every unit of one layer.

    Args:
        key: The capture key.
        scores: ``(N, U)`` each image's score per unit.
        labels: ``(N, K)`` the concepts' labels over the same images.
        names: The concepts.
        untestable: Per concept, why it is not tested, or None.
        opts: The options (metric, fire, permutations, seed, alpha, min_iou, top).
        iou: ``(U, K)`` with masks, each unit's IoU with each concept.
        sheets: Per unit, its top-images contact sheet, relative to the output folder.
    """
    clean, nonfinite = clean_scores(scores)
    ranked = rank_units(clean)
    testable = np.array([why is None for why in untestable], dtype=bool)
    values = _values(ranked, labels, opts)
    chosen = METRICS[opts.metric]
    tested = permutation_test(
        ranked,
        labels,
        values[opts.metric],
        chosen,
        permutations=opts.permutations,
        seed=opts.seed,
        fire=opts.fire,
        alpha=opts.alpha,
        cap=opts.max_permutations or None,
        testable=testable,
    )
    p = tested.p
    q = benjamini_hochberg(p)
    if iou is not None:
        values["iou"] = iou
    metric = "iou" if iou is not None else opts.metric
    ranking = values[metric]
    labelled = testable[None, :] & (q <= opts.alpha)
    if iou is not None:
        labelled &= iou >= opts.min_iou
    positives = labels.sum(axis=0)
    records = [
        _unit_record(
            u,
            values,
            (p, q, tested.permutations),
            labelled,
            ranking,
            names,
            positives,
            metric,
            opts,
            testable,
        )
        for u in range(ranked.units)
    ]
    if sheets is not None:
        for record, sheet in zip(records, sheets, strict=True):
            record["sheet"] = sheet
    return LayerLabels(
        key=key,
        units=ranked.units,
        metric=metric,
        values=values,
        p=p,
        q=q,
        null_mean=tested.null_mean,
        permutations=tested.permutations,
        cap=tested.cap,
        labelled=labelled,
        records=records,
        nonfinite=nonfinite,
    )


def _values(ranked: Any, labels: npt.NDArray[np.bool_], opts: LabelOptions) -> dict[str, F64]:
    """Every metric's ``(U, K)`` values; AUC only when it is the chosen one (it fails the
    sanity checks, so it is not shown beside the others)."""
    k = labels.shape[1]
    return {
        name: np.stack([row.observe(ranked, labels[:, c], opts.fire) for c in range(k)], axis=1)
        if k
        else np.zeros((ranked.units, 0))
        for name, row in METRICS.items()
        if name != "auc" or opts.metric == "auc"
    }


def _unit_record(
    u: int,
    values: dict[str, F64],
    tests: tuple[F64, F64, npt.NDArray[np.int64]],
    labelled: npt.NDArray[np.bool_],
    ranking: F64,
    names: Sequence[str],
    positives: npt.NDArray[np.int64],
    metric: str,
    opts: LabelOptions,
    testable: npt.NDArray[np.bool_],
) -> dict[str, Any]:
    """``labels.json``'s record of one unit: its label (or null), the best concept's figures
    (the label's, or the nearest one's when it has none), and its labels best first."""
    p, q, used = tests
    mine = np.flatnonzero(labelled[u])
    mine = mine[np.lexsort((p[u, mine], -ranking[u, mine]))]
    shown = [int(c) for c in mine[: opts.top]]
    if shown:
        best: int | None = shown[0]
    else:
        tested = np.flatnonzero(testable)
        best = (
            int(tested[np.lexsort((p[u, tested], -ranking[u, tested]))][0]) if tested.size else None
        )

    def figures(c: int) -> dict[str, Any]:
        return {
            "concept": names[c],
            "score": _round(ranking[u, c]),
            "p": _round(p[u, c]),
            "q": _round(q[u, c]),
            "positives": int(positives[c]),
        }

    record: dict[str, Any] = {
        "unit": u,
        "label": names[shown[0]] if shown else None,
        "concept": None if best is None else names[best],
        "score": None if best is None else _round(ranking[u, best]),
        "metric": metric,
        "p": None if best is None else _round(p[u, best]),
        "q": None if best is None else _round(q[u, best]),
        "positives": None if best is None else int(positives[best]),
        "permutations": None if best is None else int(used[u, best]),
    }
    if best is not None:
        for name, table in values.items():
            if name != metric:
                record[name] = _round(table[u, best])
    record["labels"] = [figures(c) for c in shown]
    record["more"] = max(0, int(mine.size) - len(shown))
    record["sheet"] = None
    return record


def _round(value: Any) -> float | None:
    v = float(value)
    return None if not np.isfinite(v) else float(f"{v:.6g}")
