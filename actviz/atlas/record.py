"""``atlas.json``: the record of an atlas (the head every command's document starts with, what a
point is, the layout, the grid, the readout, the colouring, the second model, every kept cell,
the images), and the sample of points the page's scatter draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.atlas.layout import Laid, cell_members
from actviz.atlas.options import AtlasOptions
from actviz.atlas.pictures import SPRITE_COLUMNS, TILE
from actviz.atlas.points import describe_points
from actviz.atlas.readout import Readout
from actviz.atlas.stream import Side
from actviz.command.head import json_head, model_fields
from actviz.command.session import weights_record

if TYPE_CHECKING:
    from actviz.command import Command

__all__ = ["FILES", "Files", "atlas_record", "cell_entries", "scatter_sample"]

#: Units of each cell's mean listed in the record, the highest first.
TOP_UNITS = 5


@dataclass(frozen=True)
class Files:
    """The names of an atlas's files, as its record lists them."""

    record: str = "atlas.json"
    picture: str = "atlas.png"
    page: str = "atlas.html"
    tiles: str = "atlas-tiles.png"
    icons: str = "atlas-icons.png"
    means: str = "cell-means.npy"
    table: str = "points.parquet"


FILES = Files()


def cell_entries(
    sides: list[Side],
    laid: Laid,
    rels: Sequence[str],
    tile_index: npt.NDArray[np.int64],
    icons: bool,
) -> list[dict[str, Any]]:
    """Each kept cell as ``atlas.json`` lists it (``tile_index``: per cell and rank, the tile
    of its nearest point; ``icons``: whether each cell has an icon, in the cells' order)."""
    cells = laid.cells
    grid = cells.grid
    groups = cell_members(cells)
    names = list(sides[0].loaded.categories or [])
    result = []
    for j, cell in enumerate(cells.kept):
        cell = int(cell)
        members = groups[cell]
        mean = cells.means[j]
        top = np.argsort(-mean, kind="stable")[:TOP_UNITS]
        entry: dict[str, Any] = {
            "cell": cell,
            "row": cell // grid,
            "col": cell % grid,
            "count": int(cells.counts[cell]),
        }
        if len(sides) > 1:
            b = int(laid.side[members].sum())
            entry["counts"] = {"A": len(members) - b, "B": b}
        klass = None if laid.classes is None else int(laid.classes[j])
        entry["class"] = klass
        entry["class_name"] = (
            None if klass is None else names[klass] if klass < len(names) else None
        )
        entry["colour"] = laid.coloured.cell_summary(members)
        entry["mean_row"] = j
        entry["mean_norm"] = float(np.linalg.norm(mean))
        entry["top_units"] = [[int(u), float(mean[u])] for u in top]
        entry["nearest"] = [
            _point(sides, laid, int(p), rels, int(t))
            for p, t in zip(cells.nearest[j], tile_index[j], strict=True)
            if p >= 0
        ]
        entry["icon"] = j if icons else None
        result.append(entry)
    return result


def _point(sides: list[Side], laid: Laid, p: int, rels: Sequence[str], tile: int) -> dict[str, Any]:
    side = sides[int(laid.side[p])]
    position = int(laid.position[p])
    return {
        "image": rels[int(laid.image[p])],
        "model": side.label,
        "position": None
        if position < 0
        else [position // side.plan.width, position % side.plan.width],
        "tile": tile,
    }


def atlas_record(
    cmd: Command,
    opts: AtlasOptions,
    sides: list[Side],
    laid: Laid,
    readout: Readout,
    cells: list[dict[str, Any]],
    failed: Mapping[int, str],
    rels: Sequence[str],
    icons: dict[str, Any] | None,
    reused: int,
) -> dict[str, Any]:
    """``atlas.json`` (without ``seconds``, which the caller adds last)."""

    a = sides[0]
    b = sides[1] if len(sides) > 1 else None
    loaded = a.loaded
    head = json_head(
        infos=[s.loaded.record() for s in sides],
        device=str(loaded.device),
        model=model_fields(cmd.model, loaded.record(), loaded.weights, a.warning),
    )
    coloured = laid.coloured
    return {
        **head,
        "command": "atlas",
        "random_weights": bool(loaded.weights.random),
        "layer": a.plan.key,
        "layer_info": a.plan.describe(),
        "points": {
            **describe_points(opts.points, a.plan),
            "count": len(laid.xy),
            "images": laid.images,
        },
        "reduce": {
            "name": opts.reduce,
            "words": laid.reduce,
            "seed": opts.seed,
            "pca_dims": int(laid.pca.coords.shape[1]),
            "pca_explained": [round(v, 6) for v in laid.pca.explained],
            "pca_device": str(loaded.device),
        },
        "grid": {
            "size": opts.grid,
            "min_count": opts.min_count,
            "rule": "cells with fewer than min_count points are dropped",
            "kept": len(cells),
            "dropped_points": laid.cells.dropped_points,
            "normalize": "each axis scaled to [0, 1] after clipping to its 1st-99th "
            "percentiles with a 10% margin (Lucid's normalize_layout)",
            "cell_id": "row * size + col, row 0 at the top",
        },
        "readout": readout.describe(),
        "colour": {
            "name": coloured.name,
            "kind": coloured.kind,
            "legend": [{"rgb": list(rgb), "label": label} for rgb, label in coloured.legend()],
            "range": [coloured.low, coloured.high] if coloured.kind == "continuous" else None,
        },
        "against": None
        if b is None or laid.ridge is None
        else {
            "model": b.loaded.name,
            "layer": b.plan.key,
            "weights": weights_record(b.loaded.weights, b.warning),
            "random_weights": bool(b.loaded.weights.random),
            "map": "ridge regression from B's vectors onto A's, fitted on the same images",
            "ridge": opts.ridge,
            "penalty": laid.ridge.penalty,
            "r2": laid.ridge.r2,
        },
        "cells": cells,
        "means": {"file": FILES.means, "shape": list(laid.cells.means.shape)},
        "tiles": {"file": FILES.tiles, "size": TILE, "columns": SPRITE_COLUMNS},
        "icons": icons,
        "table": FILES.table,
        "picture": FILES.picture,
        "report": FILES.page if opts.report else None,
        "images": {
            "total": len(rels),
            "ok": laid.images,
            "reused": reused,
            "failed": [{"image": rels[i], "error": why} for i, why in sorted(failed.items())],
        },
        "skipped": [
            {"path": str(p), "reason": why} for p, why in (cmd.found.skipped if cmd.found else [])
        ],
        "warnings": list(cmd.warnings),
    }


def scatter_sample(laid: Laid) -> dict[str, Any]:
    """The page's scatter: at most ``SCATTER_POINTS`` points drawn at random (for display
    only), as 16-bit positions and palette indices."""
    from actviz.report.atlas import SCATTER_POINTS

    count = len(laid.xy)
    chosen = np.arange(count)
    if count > SCATTER_POINTS:
        chosen = np.sort(np.random.default_rng(0).choice(count, SCATTER_POINTS, replace=False))
    colours, codes = np.unique(laid.coloured.rgb[chosen], axis=0, return_inverse=True)
    scatter: dict[str, Any] = {
        "x": np.rint(laid.xy[chosen, 0] * 65535).astype(np.int64).tolist(),
        "y": np.rint(laid.xy[chosen, 1] * 65535).astype(np.int64).tolist(),
        "c": codes.reshape(-1).astype(np.int64).tolist(),
        "palette": colours.astype(int).tolist(),
        "total": count,
    }
    if laid.side.any():
        scatter["side"] = laid.side[chosen].astype(int).tolist()
    return scatter
