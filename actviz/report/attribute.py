"""The page of ``actviz attribute``, ``attribute.html``, from ``attribute.json`` alone: the
methods and how they ran, each method's axiom over the images (flagged ones in red), and each
image's pictures with its target and its axioms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows, weights_banner
from actviz.report.markup import render

__all__ = ["MAX_IMAGES", "attribute_page"]

#: Images the page shows with their pictures; ``attribute.json`` lists every one.
MAX_IMAGES = 100

_AXIOMS = {
    "completeness": "sum of the attributions against F(x) - F(baseline); worst: the largest "
    "residual as a share of F(x) - F(baseline)",
    "conservation": "relevance that reached the input over the unit seed; worst: the one "
    "furthest from 1",
    "row sums": "each row of the rolled-out attention sums to 1; worst: the largest deviation",
}


def attribute_page(record: Mapping[str, Any]) -> bytes:
    """``attribute.html`` for an attribute run's record (what ``attribute.json`` holds)."""
    titles = record.get("titles") or {}
    methods = list(record.get("methods") or [])
    images = list(record.get("images") or [])
    ok = [i for i in images if i.get("status") == "ok"]
    settings = record.get("settings") or {}
    how = record.get("how") or {}
    meta = [
        MetaRow("model", str(record.get("model", "?")), code=True),
        MetaRow("target", str(record.get("target", ""))),
        MetaRow("images", f"{len(ok)} of {len(images)} attributed"),
        MetaRow("batch size", f"{record.get('batch_size')} rows per forward and backward"),
        *made_rows(record),
    ]
    rows = []
    for method in methods:
        summary = (record.get("axioms") or {}).get(method) or {}
        described = {**(settings.get(method) or {}), **(how.get(method) or {})}
        rows.append(
            {
                "name": titles.get(method, method),
                "method": method,
                "settings": ", ".join(f"{k} {_text(v)}" for k, v in described.items()),
                "axiom": summary.get("axiom"),
                "means": _AXIOMS.get(str(summary.get("axiom")), ""),
                "images": summary.get("images", 0),
                "flagged": summary.get("flagged", 0),
                "worst": _worst(summary),
            }
        )
    shown = []
    for image in ok[:MAX_IMAGES]:
        label = image.get("label")
        target = f"class {image.get('target')}" + (f" ({label})" if label else "")
        pictures = []
        for method in methods:
            entry = (image.get("methods") or {}).get(method) or {}
            axiom = entry.get("axiom")
            pictures.append(
                {
                    "title": titles.get(method, method),
                    "file": entry.get("picture"),
                    "axiom": (axiom or {}).get("line"),
                    "flagged": not (axiom or {}).get("ok", True),
                }
            )
        shown.append(
            {
                "image": image.get("image"),
                "target": target,
                "probability": f"{float(image.get('probability') or 0):.1%}",
                "pictures": pictures,
            }
        )
    return render(
        "attribute.html",
        record=record,
        banner=weights_banner(record),
        meta=meta,
        rows=rows,
        shown=shown,
        total=len(ok),
        notes=list(record.get("notes") or []),
        failed=[i for i in images if i.get("status") != "ok"],
        skipped=list(record.get("skipped") or []),
        warnings=[
            str(w)
            for w in record.get("warnings") or []
            if not is_weights_warning(str(w), record.get("weights") or {})
        ],
    )


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    return str(value)


def _worst(summary: Mapping[str, Any]) -> str:
    worst = summary.get("worst")
    if worst is None:
        return "\N{EN DASH}"
    if summary.get("axiom") == "completeness":
        return f"{float(worst):.2%}"
    return f"{float(worst):.4g}"
