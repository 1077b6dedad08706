"""``top-images.json``: every layer's every channel, its top images and its health, as data.

The document holds nothing that changes from one run to the next of the same images and
settings (no timing, no date), so an interrupted and resumed run writes the very same file as
an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actviz.command.head import json_head, model_fields
from actviz.top_images.plan import LayerPlan
from actviz.top_images.topk import LayerTop

__all__ = ["SHOWN", "LayerFiles", "Selectivity", "channel_health", "document", "selectivity"]

#: Failed and skipped files named in the document (the first by path; all are counted).
SHOWN = 100


@dataclass(frozen=True)
class LayerFiles:
    """Where one layer's pictures went, relative to the output folder."""

    folder: str
    overview: str | None
    sheets: tuple[str, ...]


@dataclass(frozen=True)
class Selectivity:
    """Which predicted class a channel's top images share.

    Attributes:
        index: The most common predicted top-1 class among the top images (the lowest index
            on a tie).
        label: Its name, when the model has category names.
        count: How many of the top images the model predicted as that class.
        fraction: ``count`` over the number of top images.
    """

    index: int
    label: str | None
    count: int
    fraction: float


def selectivity(
    top: LayerTop, channel: int, categories: Sequence[str] | None, *, judged: bool = True
) -> Selectivity | None:
    """The class a channel's top images share most; None for a model without classes, and for
    a dead channel (``judged``: a map never above zero), whose top images are ties at zero
    in path order, so the class they share says nothing of the channel."""
    if judged and int(top.active[channel]) == 0:
        return None
    classes = top.classes[channel][top.valid[channel]]
    classes = classes[classes >= 0]
    if classes.size == 0:
        return None
    values, counts = np.unique(classes, return_counts=True)
    best = int(np.argmax(counts))  # np.unique sorts, so a tie goes to the lowest class
    index, count = int(values[best]), int(counts[best])
    label = categories[index] if categories and index < len(categories) else None
    return Selectivity(index, label, count, count / int(top.valid[channel].sum()))


def channel_health(top: LayerTop, channel: int, *, judged: bool = True) -> dict[str, Any]:
    """A channel over the whole folder: how often it fires, its mean and highest score;
    ``judged`` False for a layer whose channels are never called dead (vectors)."""
    images = max(top.images, 1)
    active = int(top.active[channel])
    best = float(top.best[channel])
    return {
        "active_frac": round(active / images, 6),
        "dead": judged and active == 0,
        "mean_score": _number(top.mean(channel)),
        "max_score": _number(best) if math.isfinite(best) else None,
        "nonfinite": int(top.nonfinite[channel]),
    }


def document(
    *,
    model: str,
    weights: Mapping[str, Any],
    device: str,
    selector: str,
    k: int,
    score: str,
    input_size: tuple[int, int],
    images: int,
    failed: Sequence[tuple[Path, str]],
    skipped: Sequence[tuple[Path, str]],
    failed_count: int | None = None,
    plans: Sequence[LayerPlan],
    tops: Mapping[str, LayerTop],
    files: Mapping[str, LayerFiles],
    categories: Sequence[str] | None,
    unranked: Sequence[tuple[str, str]],
    warnings: Sequence[str],
    report: str | None,
    model_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole ``top-images.json`` (schema in docs/outputs.md): its size depends on layers,
    channels and k, not on the number of images."""
    # No date in the head: a resumed run writes the very same file as an uninterrupted one.
    head = json_head(
        infos=[model_info],
        device=device,
        model=model_fields(model, dict(model_info or {}), weights),
        created=False,
    )
    return {
        **head,
        "selector": selector,
        "k": k,
        "score": score,
        "input_size": list(input_size),
        "images": images,
        # Both capped, and counted: the document's size never depends on the folder's.
        "failed": [{"path": str(p), "reason": why} for p, why in sorted(failed)[:SHOWN]],
        "failed_count": len(failed) if failed_count is None else failed_count,
        "skipped": [{"path": str(p), "reason": why} for p, why in skipped[:SHOWN]],
        "skipped_count": len(skipped),
        "report": report,
        "warnings": list(warnings),
        "unranked": [{"layer": key, "reason": why} for key, why in unranked],
        "layers": [
            _layer(plan, tops[plan.key], files.get(plan.key), categories)
            for plan in plans
            if plan.key in tops
        ],
    }


def _layer(
    plan: LayerPlan,
    top: LayerTop,
    files: LayerFiles | None,
    categories: Sequence[str] | None,
) -> dict[str, Any]:
    channels = []
    for c in range(top.channels):
        chosen = selectivity(top, c, categories, judged=plan.judges_dead)
        channels.append(
            {
                "channel": c,
                "sheet": files.sheets[c] if files is not None else None,
                "top": [
                    {"path": e["path"], "score": _score(e["score"]), "y": e["y"], "x": e["x"]}
                    for e in top.entries(c)
                ],
                **channel_health(top, c, judged=plan.judges_dead),
                "selectivity": None
                if chosen is None
                else {
                    "class": chosen.index,
                    "label": chosen.label,
                    "count": chosen.count,
                    "fraction": round(chosen.fraction, 6),
                },
            }
        )
    return {
        "name": plan.key,
        **plan.describe(),
        "images": top.images,
        "channels_total": top.channels,
        "dead_channels": int((top.active == 0).sum()) if plan.judges_dead else 0,
        "dead_judged": plan.judges_dead,
        "folder": files.folder if files is not None else None,
        "overview": files.overview if files is not None else None,
        "channels": channels,
    }


def _score(value: float) -> float | None:
    """A float32 score as the shortest decimal that reads back as the same float32."""
    if not math.isfinite(value):
        return None
    return float(str(np.float32(value)))


def _number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.7g}")
