"""The card of a sparse dictionary (``actviz.sae``'s result): its size, how it trained, its
quality on the held-out images, stability, and its features' figures and contact sheets."""

from __future__ import annotations

import json
from typing import Any

from actviz.cards.card import MAX_ROWS, MAX_THUMBS, Card, Table
from actviz.cards.results import _links, _thumb, _weights_warnings, fmt, weights_text

__all__ = ["dictionary_card"]


def _share(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def _features(result: Any) -> list[dict[str, Any]]:
    """The feature pages' figures (``sae-features/features.json``), when pages were written."""
    if result.index is None:
        return []
    try:
        text = (result.out / "sae-features" / "features.json").read_text(encoding="utf-8")
        features = json.loads(text).get("features")
    except (OSError, ValueError, AttributeError):
        return []
    return features if isinstance(features, list) else []


def dictionary_card(result: Any, pictures: bool = True) -> Card:
    """The card of an ``SaeResult``: the most stable features first (the densest with one
    seed), their contact sheets as thumbnails."""
    q = result.quality or {}
    training = result.document.get("training") or {}
    features = _features(result)
    stable = result.stability is not None
    key = "stability" if stable else "density"
    ranked = sorted(features, key=lambda r: -(r.get(key) or 0.0))
    rows = [
        [
            r.get("feature"),
            _share(r.get("density")),
            _share(r.get("images")),
            fmt(r.get("strength")),
            fmt(r.get("stability")) if stable else "-",
            ", ".join(f"{name} ({share:.0%})" for name, share in r.get("classes") or []) or "-",
        ]
        for r in ranked[:MAX_ROWS]
    ]
    thumbs = [
        t
        for r in ranked[:MAX_THUMBS]
        if pictures and r.get("sheet")
        if (t := _thumb(result.out, r["sheet"], f"feature {r.get('feature')}")) is not None
    ]
    where = f"{result.held_out} held-out images" if result.held_out else "the training images"
    changed = q.get("top1_changed_share")
    summary = (
        f"SaeResult(model={result.model!r}, layer={result.layer!r}, features={result.features}, "
        f"k={result.k}, fve={q.get('fve')}, steps={result.steps}, out={str(result.out)!r})"
    )
    stability = result.document.get("stability") or {}
    return Card(
        kind="sae",
        title=f"{result.model} {result.layer}",
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            (
                "dictionary",
                f"{result.features:,} features over {result.channels:,} channels, k {result.k}",
            ),
            (
                "training",
                f"{result.epochs} passes ({training.get('epochs_asked', result.epochs)} epochs "
                f"asked), {result.steps:,} steps of {training.get('sae_batch')} vectors, "
                f"{result.tokens:,} vectors from {result.images:,} images on {result.device}",
            ),
            (
                "quality",
                f"on {where}: variance explained {_share(q.get('fve'))}, L0 {fmt(q.get('l0'))}, "
                f"dead {_share(q.get('dead_share'))}, dense {_share(q.get('dense_share'))}, "
                f"top-1 changed {_share(changed) if changed is not None else 'n/a'}",
            ),
            (
                "stability",
                f"{result.seeds} seeds: mean matched cosine {fmt(stability.get('mean'))}, "
                f"{_share(stability.get('stable_share'))} of features stable"
                if stable
                else "one seed (--seeds 2 scores each feature)",
            ),
            ("time", f"{result.seconds:.1f} s (training {result.train_seconds:.1f} s)"),
        ],
        warnings=_weights_warnings(result.weights, None, result.warnings),
        flags=[f"{len(result.failed):,} images failed"] if result.failed else [],
        table=Table(
            ["feature", "density", "images", "strength", "stability", "classes where it fires"],
            rows,
            len(features),
            "features (over the whole folder; all of them in the index)",
        ),
        thumbs=thumbs,
        more_thumbs=max(0, len(features) - len(thumbs)),
        links=_links(result.out, [("index", result.index), ("sae.json", result.json)]),
    )
