"""From per-image scores to what a user acts on: per method, each metric's mean over images with
a bootstrap confidence interval, whether it beats each baseline (a paired bootstrap of the
per-image differences), and the sanity check's verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from actviz.cam_eval.metrics import BASELINES

__all__ = [
    "BOOTSTRAP",
    "METRICS",
    "MIN_VERDICT_IMAGES",
    "NEGLIGIBLE",
    "SANITY_THRESHOLD",
    "bootstrap_mean",
    "summarize",
]

#: Metric -> (label, +1 when higher is better, -1 when lower is).
METRICS: dict[str, tuple[str, int]] = {
    "deletion_auc": ("deletion AUC", -1),
    "insertion_auc": ("insertion AUC", +1),
    "drop_pct": ("average drop %", -1),
    "increase": ("increase in confidence", +1),
}
#: Resamples of the bootstrap, its confidence level, and its seed (results are reproducible).
BOOTSTRAP = {"resamples": 1000, "level": 0.95, "seed": 0}
#: A method whose maps keep at least this mean Spearman correlation with the original ones
#: once the last blocks are re-initialised does not depend on the weights: it is flagged.
SANITY_THRESHOLD = 0.9
#: Images a verdict against a baseline needs. With fewer, even images that all agree cannot
#: conclude at 95%: a sign test's two-sided p for n pairs that all agree is 2^(1 - n), 0.0625
#: at 5 and 0.031 at 6, while a percentile bootstrap of 2 to 5 differences lies on one side
#: of 0 whenever they do.
MIN_VERDICT_IMAGES = 6
#: Paired differences of areas (probabilities, 0 to 1) all below this are no evidence: a
#: target the model gives a probability of 3e-4 moves its areas by 1e-5 whatever the map.
NEGLIGIBLE = 1e-3


def bootstrap_mean(values: Sequence[float]) -> dict[str, float | None]:
    """The mean and a percentile bootstrap confidence interval of it (``BOOTSTRAP``); a
    single value's interval is the value itself, no value gives None everywhere."""

    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if data.size == 0:
        return {"mean": None, "low": None, "high": None}
    mean = float(data.mean())
    if data.size == 1:
        return {"mean": mean, "low": mean, "high": mean}
    rng = np.random.default_rng(int(BOOTSTRAP["seed"]))
    picks = rng.integers(0, data.size, size=(int(BOOTSTRAP["resamples"]), data.size))
    means = data[picks].mean(axis=1)
    tail = (1 - float(BOOTSTRAP["level"])) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"mean": mean, "low": float(low), "high": float(high)}


def _verdict(
    method: Sequence[float], baseline: Sequence[float], sign: int, negligible: float = 0.0
) -> str:
    """``yes`` when the interval of the paired difference lies on the better side of 0,
    ``no`` when on the worse side, ``tie`` when it holds 0; ``n/a`` where the images cannot
    conclude: fewer than :data:`MIN_VERDICT_IMAGES`, or every difference below
    ``negligible``."""
    if len(method) < MIN_VERDICT_IMAGES:
        return "n/a"
    diffs = [sign * (a - b) for a, b in zip(method, baseline, strict=True)]
    if all(abs(d) < negligible for d in diffs):
        return "n/a"
    ci = bootstrap_mean(diffs)
    if ci["low"] is None or ci["high"] is None:
        return "tie"
    if ci["low"] > 0:
        return "yes"
    if ci["high"] < 0:
        return "no"
    return "tie"


def summarize(
    records: Sequence[Mapping[str, Any]], names: Sequence[str], stages: Sequence[str]
) -> dict[str, Any]:
    """Per map name (methods and baselines): each metric's mean and interval, the verdict
    against each baseline (per metric, and overall on insertion minus deletion AUC), the
    mean curves, and the sanity check per stage with its flag.

    Args:
        records: The images' records (``status`` ``ok``), each with ``scores`` per name and
            ``sanity`` per name (one correlation per stage).
        names: Methods, then baselines.
        stages: The sanity check's stages (the blocks re-initialised, cumulatively).
    """
    ok = [r for r in records if r.get("status") == "ok"]
    per: dict[str, Any] = {}
    for name in names:
        column = {m: [float(r["scores"][name][m]) for r in ok] for m in METRICS}
        balance = [
            r["scores"][name]["insertion_auc"] - r["scores"][name]["deletion_auc"] for r in ok
        ]
        entry: dict[str, Any] = {
            "baseline": name in BASELINES,
            "metrics": {m: bootstrap_mean(v) for m, v in column.items()},
            "balance": bootstrap_mean(balance),
            "curves": {
                kind: _mean_curve([r["scores"][name][kind] for r in ok])
                for kind in ("deletion", "insertion")
            },
        }
        per[name] = entry
    for name in names:
        entry = per[name]
        beats: dict[str, Any] = {}
        for base in BASELINES:
            if base == name or base not in per:
                continue
            verdicts = {
                m: _verdict(
                    [float(r["scores"][name][m]) for r in ok],
                    [float(r["scores"][base][m]) for r in ok],
                    sign,
                    NEGLIGIBLE if m.endswith("_auc") else 0.0,
                )
                for m, (_, sign) in METRICS.items()
            }
            verdicts["overall"] = _verdict(
                [
                    r["scores"][name]["insertion_auc"] - r["scores"][name]["deletion_auc"]
                    for r in ok
                ],
                [
                    r["scores"][base]["insertion_auc"] - r["scores"][base]["deletion_auc"]
                    for r in ok
                ],
                +1,
                NEGLIGIBLE,
            )
            beats[base] = verdicts
        entry["beats"] = beats
        entry["sanity"] = _sanity(ok, name, stages)
    return per


def _mean_curve(curves: Sequence[Sequence[float]]) -> list[float] | None:
    if not curves:
        return None
    n = len(curves[0])
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def _sanity(ok: Sequence[Mapping[str, Any]], name: str, stages: Sequence[str]) -> dict[str, Any]:
    """Per stage the mean Spearman correlation to the original maps; flagged when the last
    stage's is at least :data:`SANITY_THRESHOLD`."""
    if not stages:
        return {"stages": [], "flagged": None}
    rows: list[dict[str, Any]] = []
    for j, block in enumerate(stages):
        values = [
            float(r["sanity"][name][j])
            for r in ok
            if r.get("sanity") and r["sanity"][name][j] is not None
        ]
        # An image whose map became constant has no ranking to correlate: it is left out,
        # and the count says over how many images the mean is.
        rows.append({"block": block, "spearman": bootstrap_mean(values), "images": len(values)})
    last = rows[-1]["spearman"]["mean"]
    return {"stages": rows, "flagged": last is not None and last >= SANITY_THRESHOLD}
