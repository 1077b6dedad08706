"""The page of ``actviz diff``, ``diff.html``, from ``diff.json`` alone.

Rendered from ``templates/diff.html``, which extends the report's shell and uses its blocks, so
the page looks like the rest of the report, escapes every name, and opens from disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, weights_banner
from actviz.report.markup import render

__all__ = ["diff_page"]


def diff_page(record: Mapping[str, Any]) -> bytes:
    """``diff.html`` for a diff's record (what ``diff.json`` holds), as UTF-8.

    The chart and the pictures are linked by their paths in the record, relative to the
    output folder, where the page goes.
    """
    metric = str(record.get("metric", "cosine"))
    threshold = float(record.get("threshold", 0.99))
    first = record.get("first_divergent")
    layers = list(record.get("layers") or [])
    rows = []
    for position, layer in enumerate(layers):
        value = layer.get(metric)
        rows.append(
            {
                "position": position,
                "name": layer.get("name", ""),
                "type": layer.get("module_type", ""),
                "cka": _fixed(layer.get("cka")),
                "cosine": _fixed(layer.get("cosine")),
                "rel_l2": layer.get("rel_l2"),
                "value": value,
                "note": layer.get("note"),
                "below": value is not None and value < threshold,
                "first": layer.get("name") == first,
            }
        )
    scored = [row for row in rows if row["value"] is not None]
    lowest = sorted(scored, key=lambda row: row["value"])[:5]
    pictures: dict[str, list[Mapping[str, Any]]] = {}
    for picture in record.get("pictures") or []:
        pictures.setdefault(str(picture.get("image", "")), []).append(picture)
    banners = [
        banner
        for banner in (weights_banner(record.get(side) or {}) for side in ("a", "b"))
        if banner is not None
    ]
    inputs = record.get("inputs") or []
    return render(
        "diff.html",
        record=record,
        two_images=record.get("mode") == "images",
        a=_side(record.get("a") or {}),
        b=_side(record.get("b") or {}),
        banner=banners[0] if banners else None,
        meta=_meta(record, rows, inputs),
        metric=metric,
        threshold=threshold,
        first=first,
        rows=rows,
        lowest=lowest,
        pictures=pictures,
        first_pictures=[
            p for p in record.get("pictures") or [] if first is not None and p.get("layer") == first
        ],
        failed=[i for i in inputs if i.get("status") == "failed"],
        skipped=record.get("skipped") or [],
        warnings=[
            str(w)
            for w in record.get("warnings") or []
            if not any(
                is_weights_warning(str(w), (record.get(side) or {}).get("weights") or {})
                for side in ("a", "b")
            )
        ],
    )


def _side(side: Mapping[str, Any]) -> str:
    """``resnet18 (checkpoint a.pt)``, ``resnet18 (random)``."""
    weights = side.get("weights") or {}
    model = str(side.get("model", "?"))
    if weights.get("random"):
        return f"{model} (random weights)"
    name = weights.get("name")
    return f"{model} ({weights.get('source')} {name})" if name else model


def _meta(record: Mapping[str, Any], rows: list[Any], inputs: list[Any]) -> list[MetaRow]:
    ok = sum(1 for i in inputs if i.get("status") == "ok")
    cka = record.get("cka") or {}
    facts = [
        MetaRow("model A", _side(record.get("a") or {}), code=True),
    ]
    if record.get("mode") == "models":
        facts.append(MetaRow("model B", _side(record.get("b") or {}), code=True))
    else:
        facts.append(MetaRow("images", " vs ".join(str(i.get("path")) for i in inputs), True))
    facts += [
        MetaRow("layers", f"{len(rows)} selected by '{record.get('selector', '')}'"),
        MetaRow("images compared", f"{ok} of {len(inputs)}"),
        MetaRow(
            "divergent when",
            f"{record.get('metric')} < {record.get('threshold')} (the first such layer in depth "
            "order is the first divergent one)",
        ),
        MetaRow("CKA", cka.get("estimator") or cka.get("note")),
        MetaRow("device", record.get("device", "?")),
        MetaRow("actviz", f"{record.get('actviz', '')}, {record.get('created', '')}"),
    ]
    return facts


def _fixed(value: Any) -> str:
    """A similarity with four decimals (0.99996 must not read as 1); a dash for None."""
    return "\N{EN DASH}" if value is None else f"{float(value):.4f}"
