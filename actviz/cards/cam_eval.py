"""The card of ``actviz.cam_eval``'s result: per map (each method, then the baselines) its
deletion and insertion areas, average drop and increase, what it beats, and the sanity check;
the random-weights warning first, the maps that failed the sanity check as flags, the curves
chart as a thumbnail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.cards.card import Card, Table
from actviz.cards.results import RANDOM_WARNING, _links, _thumb, fmt

__all__ = ["cam_eval_card"]

_COLUMNS = ["map", "deletion AUC", "insertion AUC", "avg drop %", "increase", "beats", "sanity"]


def _mean(metric: Mapping[str, Any] | None) -> str:
    return fmt((metric or {}).get("mean"))


def _sanity(entry: Mapping[str, Any]) -> str:
    """The last stage's rank correlation to the original map (``UNCHANGED``: flagged)."""
    sanity = entry.get("sanity") or {}
    stages = sanity.get("stages") or []
    last = (stages[-1].get("spearman") or {}).get("mean") if stages else None
    if last is None:
        return "-"
    return f"{last:.2f}" + (" UNCHANGED" if sanity.get("flagged") else "")


def _row(name: str, entry: Mapping[str, Any]) -> list[str]:
    metrics = entry.get("metrics") or {}
    beats = entry.get("beats") or {}
    return [
        f"({name})" if entry.get("baseline") else name,
        _mean(metrics.get("deletion_auc")),
        _mean(metrics.get("insertion_auc")),
        _mean(metrics.get("drop_pct")),
        _mean(metrics.get("increase")),
        " ".join(f"{base}:{v.get('overall', '-')}" for base, v in beats.items()) or "-",
        _sanity(entry),
    ]


def cam_eval_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``CamEvalResult``."""
    summary: Mapping[str, Any] = result.summary
    failed, reused = len(result.failed), result.reused
    scored = len(result.images) - failed
    counts = ", ".join(
        part
        for part in (f"{failed:,} failed" if failed else "", f"{reused:,} reused" if reused else "")
        if part
    )
    flagged = [
        f"{name}: sanity check failed: its maps barely change as the weights are re-initialised"
        for name, entry in summary.items()
        if not entry.get("baseline") and (entry.get("sanity") or {}).get("flagged")
    ]
    first = [RANDOM_WARNING] if result.random_weights else []
    chart = _thumb(result.out, result.chart.name, "curves") if pictures and result.chart else None
    model = getattr(result, "model", "") or "cam-eval"
    return Card(
        kind="cam-eval",
        title=str(model),
        summary=(
            f"CamEvalResult(model={model!r}, layer={result.layer!r}, methods={result.methods!r}, "
            f"images={scored}, out={str(result.out)!r})"
        ),
        facts=[
            ("weights", "random" if result.random_weights else "trained"),
            ("layer", str(result.layer)),
            ("methods", ", ".join(result.methods)),
            ("images", f"{scored:,} scored" + (f" ({counts})" if counts else "")),
            ("time", f"{result.seconds:.1f} s on {result.device}"),
        ],
        warnings=first + [w for w in result.warnings if w not in first],
        flags=flagged,
        table=Table(_COLUMNS, [_row(n, e) for n, e in summary.items()], len(summary), "maps"),
        thumbs=[chart] if chart is not None else [],
        links=_links(result.out, [("report", result.report), ("cam-eval.json", result.record)]),
    )
