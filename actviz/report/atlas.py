"""The page of ``actviz atlas``, ``atlas.html``, from ``atlas.json`` and a sample of the points.

The page draws the cells and their pictures itself (a canvas, from the sheet of tiles), so it
has no cap on the points behind them: each cell's count is the exact one from the record. The
scatter beside it is drawn from at most :data:`SCATTER_POINTS` points, sampled for display
only, and says how many it shows of how many. Everything the script reads sits in the page as
JSON (escaped for a script element); nothing is fetched from a network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows, weights_banner
from actviz.report.markup import render

__all__ = ["SCATTER_POINTS", "atlas_page"]

#: Points the page's scatter draws at most.
SCATTER_POINTS = 50_000
#: Cells listed in the page's table (the largest first); every cell is on the canvas.
TABLE_CELLS = 100


def atlas_page(record: Mapping[str, Any], scatter: Mapping[str, Any]) -> bytes:
    """``atlas.html`` for an atlas's record and its scatter sample (``x``, ``y`` as integers
    of 0-65535, ``c`` palette indices, ``palette``, ``total``), as UTF-8."""
    cells = sorted(record.get("cells") or [], key=lambda c: -int(c.get("count", 0)))
    return render(
        "atlas.html",
        record=record,
        banner=weights_banner(record),
        meta=_meta(record),
        data=_data(record, scatter),
        table=cells[:TABLE_CELLS],
        against=record.get("against"),
        shown=len(scatter.get("x") or []),
        total=int(scatter.get("total", 0)),
        failed=[
            {"path": f.get("image"), "error": f.get("error")}
            for f in (record.get("images") or {}).get("failed") or []
        ],
        warnings=[
            str(w)
            for w in record.get("warnings") or []
            if not is_weights_warning(str(w), record.get("weights") or {})
        ],
    )


def _meta(record: Mapping[str, Any]) -> list[MetaRow]:
    """The atlas's facts."""
    grid = record.get("grid") or {}
    points = record.get("points") or {}
    reduce = record.get("reduce") or {}
    readout = record.get("readout") or {}
    against = record.get("against")
    supports = f"none: {readout.get('reason')}"
    if readout.get("linear"):
        supports = f"{readout.get('rule')} ({readout.get('module')})"
    meta = [
        MetaRow("model", str(record.get("model", "?")), code=True),
        MetaRow("layer", str(record.get("layer", "")), code=True),
        MetaRow(
            "points",
            f"{points.get('count', 0):,} from {points.get('images', 0):,} images: "
            f"{points.get('what', '')}",
        ),
        MetaRow(
            "layout", f"PCA to {reduce.get('pca_dims')} dimensions, then {reduce.get('words')}"
        ),
        MetaRow(
            "cells",
            f"{grid.get('size')} x {grid.get('size')} grid; cells with fewer than "
            f"{grid.get('min_count')} points dropped ({grid.get('kept', 0):,} kept, "
            f"{grid.get('dropped_points', 0):,} points in dropped cells)",
        ),
        MetaRow("supported class", supports),
        MetaRow("coloured by", str((record.get("colour") or {}).get("name", ""))),
        *made_rows(record),
    ]
    if against:
        meta.insert(
            1,
            MetaRow(
                "against",
                f"{against.get('model')} at {against.get('layer')}: its vectors mapped onto "
                f"the first model's by ridge regression on the same images (R\u00b2 "
                f"{against.get('r2', 0):.3f}), then one layout",
            ),
        )
    return meta


def _data(record: Mapping[str, Any], scatter: Mapping[str, Any]) -> dict[str, Any]:
    """What the page's script draws from: every kept cell, the sheets, the scatter sample."""
    cells = []
    for c in record.get("cells") or []:
        colour = c.get("colour") or {}
        named = c.get("class_name")
        if named is None and c.get("class") is not None:
            named = f"class {c['class']}"
        cells.append(
            {
                "cell": c["cell"],
                "row": c["row"],
                "col": c["col"],
                "count": c["count"],
                "counts": c.get("counts"),
                "cls": named,
                "rgb": colour.get("rgb"),
                "colour": colour.get("label") or colour.get("mean"),
                "tiles": [n.get("tile") for n in c.get("nearest") or []],
                "names": [n.get("image") for n in c.get("nearest") or []],
                "icon": c.get("icon"),
            }
        )
    return {
        "grid": (record.get("grid") or {}).get("size"),
        "cells": cells,
        "tiles": record.get("tiles"),
        "icons": record.get("icons"),
        "scatter": dict(scatter),
        "legend": (record.get("colour") or {}).get("legend") or [],
    }
