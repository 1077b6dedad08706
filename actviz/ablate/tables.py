"""What the per-image results add up to, in numpy: per class and ablation the image count,
accuracy (the class's recall) and balanced accuracy (the mean of the recall and the
specificity of "this class or not", as Bau et al.'s dissect computes it) before and after, the
mean change of the class's logit, and the flow (which classes took the images a class lost);
for a sweep, each class's units ranked on one part of the folder, and the curves of accuracy
on the rest as the N most (and least) important units are removed together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "FLOW_SHOWN",
    "Outcome",
    "class_rows",
    "curve_sizes",
    "flow_rows",
    "overall",
    "rank_split",
    "ranking",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Where a class's lost images went: the classes shown per class at most.
FLOW_SHOWN = 5


@dataclass(frozen=True)
class Outcome:
    """Every image before and after one ablation (arrays of one length, image order).

    Attributes:
        labels: Each image's class.
        pred_before, pred_after: The model's top class before and after.
        logit_before, logit_after: The logit of the image's class before and after.
    """

    labels: IntArray
    pred_before: IntArray
    pred_after: IntArray
    logit_before: FloatArray
    logit_after: FloatArray


def _rate(hits: IntArray, counts: IntArray) -> list[float | None]:
    return [float(h) / float(c) if c else None for h, c in zip(hits, counts, strict=True)]


def _balanced(tpr: float | None, tnr: float | None) -> float | None:
    if tpr is None:
        return None
    return tpr if tnr is None else (tpr + tnr) / 2


def class_rows(outcome: Outcome, names: Mapping[int, str]) -> list[dict[str, Any]]:
    """One row per class present among the labels, in class order."""
    labels = outcome.labels
    classes = np.unique(labels)
    rows = []
    size = (
        int(
            max(
                labels.max(initial=0),
                outcome.pred_before.max(initial=0),
                outcome.pred_after.max(initial=0),
            )
        )
        + 1
    )
    n = np.bincount(labels, minlength=size)
    total = len(labels)
    per: dict[str, tuple[list[float | None], list[float | None]]] = {}
    for when, pred in (("before", outcome.pred_before), ("after", outcome.pred_after)):
        correct = np.bincount(labels[pred == labels], minlength=size)
        predicted = np.bincount(pred, minlength=size)
        # Specificity of "class c or not": images of other classes not predicted as c.
        negatives = total - n
        true_negatives = negatives - (predicted - correct)
        per[when] = (_rate(correct, n), _rate(true_negatives, negatives))
    change = outcome.logit_after - outcome.logit_before
    sums = np.bincount(labels, weights=change, minlength=size)
    for c in classes:
        i = int(c)
        before, after = per["before"][0][i], per["after"][0][i]
        rows.append(
            {
                "class": names.get(i, f"class {i}"),
                "index": i,
                "n": int(n[i]),
                "acc_before": before,
                "acc_after": after,
                "balanced_acc_before": _balanced(before, per["before"][1][i]),
                "balanced_acc_after": _balanced(after, per["after"][1][i]),
                "dlogit": float(sums[i] / n[i]),
            }
        )
    return rows


def ranked(ablations: Sequence[Mapping[str, Any]]) -> list[int]:
    """The ablations' indices, the one that lost most images first; on a tie (often none
    lost any), the one that moved the labels' logits down most; then the order given (unit 2
    before unit 10). The pictures, the card and the terminal table all lead with the first."""
    return sorted(
        range(len(ablations)),
        key=lambda i: (
            -int(ablations[i]["overall"]["lost"]),
            float(ablations[i]["overall"].get("dlogit", 0.0)),
            i,
        ),
    )


def overall(outcome: Outcome) -> dict[str, Any]:
    """Accuracy over every image, balanced accuracy (the mean recall over the classes
    present), and how many images changed prediction."""
    labels = outcome.labels
    classes = np.unique(labels)
    out: dict[str, Any] = {"images": len(labels)}
    for when, pred in (("before", outcome.pred_before), ("after", outcome.pred_after)):
        hit = pred == labels
        out[f"acc_{when}"] = float(hit.mean()) if len(labels) else None
        recalls = [float(hit[labels == c].mean()) for c in classes]
        out[f"balanced_acc_{when}"] = float(np.mean(recalls)) if recalls else None
    out["changed"] = int((outcome.pred_before != outcome.pred_after).sum())
    lost = (outcome.pred_before == labels) & (outcome.pred_after != labels)
    out["lost"] = int(lost.sum())
    out["dlogit"] = (
        float((outcome.logit_after - outcome.logit_before).mean()) if len(labels) else 0.0
    )
    return out


def flow_rows(outcome: Outcome, names: Mapping[int, str]) -> list[dict[str, Any]]:
    """Per class that lost images (right before, wrong after): how many, and the classes
    that took them, most first (at most :data:`FLOW_SHOWN`)."""
    labels = outcome.labels
    lost = (outcome.pred_before == labels) & (outcome.pred_after != labels)
    rows: list[dict[str, Any]] = []
    for c in np.unique(labels[lost]):
        went = outcome.pred_after[lost & (labels == c)]
        to, counts = np.unique(went, return_counts=True)
        order = np.lexsort((to, -counts))[:FLOW_SHOWN]
        rows.append(
            {
                "class": names.get(int(c), f"class {int(c)}"),
                "index": int(c),
                "lost": int(len(went)),
                "to": [
                    {
                        "class": names.get(int(to[j]), f"class {int(to[j])}"),
                        "index": int(to[j]),
                        "n": int(counts[j]),
                    }
                    for j in order
                ],
            }
        )
    rows.sort(key=lambda r: (-r["lost"], r["index"]))
    return rows


def rank_split(labels: IntArray, share: float, seed: int) -> npt.NDArray[np.bool_]:
    """Which images rank the units (True) and which measure the curves: ``share`` of each
    class's images (at least one, and at least one left to measure when it has two), drawn
    from ``seed``."""
    rng = np.random.default_rng(seed)
    ranks = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        rng.shuffle(members)
        count = int(round(share * len(members)))
        count = min(max(count, 1), len(members) - 1) if len(members) > 1 else 1
        ranks[members[:count]] = True
    return ranks


def ranking(
    labels: IntArray,
    logit_before: FloatArray,
    logit_after: npt.NDArray[np.float64],
    ranks: npt.NDArray[np.bool_],
) -> dict[int, tuple[IntArray, FloatArray]]:
    """Per class (with ranking images): the coordinates ordered most important first by the
    mean drop of the class's logit over its ranking images (``logit_after``: ``(K, N)``), ties
    in coordinate order, and those drops."""
    out = {}
    for c in np.unique(labels[ranks]):
        chosen = ranks & (labels == c)
        drop = (logit_before[chosen][None, :] - logit_after[:, chosen]).mean(axis=1)
        order = np.lexsort((np.arange(len(drop)), -drop))
        out[int(c)] = (order.astype(np.int64), drop[order])
    return out


def curve_sizes(count: int) -> list[int]:
    """How many units each point of a curve removes together: 1-5, then 10, 20, 50, ...,
    and all of them (as Bau et al. go to 20, 64, 128 and 256 of 512)."""
    steps = [1, 2, 3, 4, 5]
    scale = 10
    while scale < count:
        steps += [scale, 2 * scale, 5 * scale]
        scale *= 10
    return sorted({s for s in steps if s < count} | {count})


def curve_accuracy(
    labels: IntArray, preds: npt.NDArray[np.int64], classes: Sequence[int]
) -> dict[int, list[float | None]]:
    """Per class, the accuracy of each point: ``preds`` is ``(points, N)``."""
    out = {}
    for c in classes:
        members = labels == c
        out[int(c)] = [
            float((row[members] == c).mean()) if members.any() else None for row in preds
        ]
    return out
