"""The card of an attribute run's result (``actviz.attribute``): the model and its weights (the
random-weights warning first), the methods, each method's axiom over the images (flagged ones
as flags), a table of the first images with their targets and axioms, and thumbnails of the
first pictures."""

from __future__ import annotations

from typing import Any

from actviz.cards.card import MAX_ROWS, Card, Table
from actviz.cards.results import _links, _thumbs, _weights_warnings, fmt, weights_text

__all__ = ["attribute_card"]


def attribute_card(result: Any, pictures: bool = True) -> Card:
    """The card of an ``AttributeResult``."""
    methods = list(result.methods)
    ok = [r for r in result.images if r.get("status") == "ok"]
    rows = []
    for image in ok[:MAX_ROWS]:
        label = image.get("label")
        cells = [
            image.get("image", "?"),
            f"{image.get('target')}" + (f" {label}" if label else ""),
            f"{float(image.get('probability') or 0):.1%}",
        ]
        for method in methods:
            axiom = ((image.get("methods") or {}).get(method) or {}).get("axiom")
            cells.append(_axiom_cell(axiom))
        rows.append(cells)
    flags = []
    for method in methods:
        summary = result.axioms.get(method) or {}
        if summary.get("flagged"):
            flags.append(
                f"{method}: {summary['axiom']} flagged on {summary['flagged']} of "
                f"{summary['images']} images"
            )
    named = (
        (entry.get("picture"), f"{method} {image.get('image')}")
        for image in ok
        for method, entry in (image.get("methods") or {}).items()
    )
    thumbs = _thumbs(result.out, named) if pictures else []
    count = sum(len(image.get("methods") or {}) for image in ok)
    summary = (
        f"AttributeResult(model={result.model!r}, methods={methods!r}, images={len(ok)}, "
        f"failed={len(result.failed)}, out={str(result.out)!r})"
    )
    return Card(
        kind="attribute",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            ("methods", ", ".join(methods)),
            (
                "images",
                f"{len(ok):,} attributed, {len(result.failed):,} failed"
                + (f", {result.reused:,} reused" if result.reused else ""),
            ),
            ("time", f"{result.seconds:.1f} s on {result.device}"),
        ],
        warnings=_weights_warnings(result.weights, result.weights_warning, result.warnings),
        flags=flags,
        table=Table(["image", "target", "p", *methods], rows, len(ok), "images"),
        thumbs=thumbs,
        more_thumbs=max(0, count - len(thumbs)),
        links=_links(result.out, [("report", result.report), ("attribute.json", result.record)]),
    )


def _axiom_cell(axiom: Any) -> str:
    if not axiom:
        return "-"
    flag = "" if axiom.get("ok", True) else " FLAGGED"
    name = axiom.get("name")
    if name == "completeness":
        return f"residual {fmt(axiom.get('residual'))}{flag}"
    if name == "conservation":
        return f"kept {fmt(axiom.get('kept'))}{flag}"
    return f"rows +-{fmt(axiom.get('deviation'))}{flag}"
