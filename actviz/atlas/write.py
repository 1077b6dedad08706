"""What an atlas writes at the end: the tiles, the icons, ``cell-means.npy``,
``points.parquet``, ``atlas.png``, ``atlas.json`` and ``atlas.html``; and the result."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz import output
from actviz.atlas.colours import folder_class
from actviz.atlas.layout import Laid, cell_members
from actviz.atlas.options import AtlasOptions
from actviz.atlas.points import describe_points
from actviz.atlas.readout import Readout
from actviz.atlas.result import AtlasResult
from actviz.atlas.resume import FOLDER, JOURNAL
from actviz.atlas.stream import Side
from actviz.atlas.table import POINTS_FILE, write_points
from actviz.command.head import json_head, model_fields
from actviz.errors import OutputError

if TYPE_CHECKING:
    from actviz.command import Command

__all__ = ["OUTPUT_FILES", "RANDOM_NOTE", "earlier_files", "write_outputs"]

RECORD = "atlas.json"
PICTURE = "atlas.png"
PAGE = "atlas.html"
TILES = "atlas-tiles.png"
ICONS = "atlas-icons.png"
MEANS = "cell-means.npy"
#: Every file the last step writes (``--overwrite`` removes them).
OUTPUT_FILES = (RECORD, PICTURE, PAGE, TILES, ICONS, MEANS, POINTS_FILE)
RANDOM_NOTE = "random weights: an untrained model, so the map shows no learned features"
#: Units of each cell's mean listed in the record, the highest first.
TOP_UNITS = 5


def write_outputs(
    cmd: Command,
    opts: AtlasOptions,
    sides: list[Side],
    laid: Laid,
    readout: Readout,
    rels: Sequence[str],
    paths: Sequence[Path],
    failed: Mapping[int, str],
    *,
    reused: int,
    forward_seconds: float,
) -> AtlasResult:
    """Write every file; the result the command returns."""
    from actviz.atlas.pictures import atlas_png, cell_frames, cell_pictures, cut_tiles, sprite_png

    a = sides[0]
    out = opts.out
    tiles, tile_index = cut_tiles(sides, laid, paths, opts)
    output.write_bytes(out / TILES, sprite_png(tiles))
    icons = None
    icon_record = None
    if opts.icons == "fv" and len(laid.cells.kept):
        from actviz.atlas.icons import cell_icons

        icons = cell_icons(a, laid, opts)
        output.write_bytes(out / ICONS, sprite_png(icons))
        icon_record = {
            "file": ICONS,
            "size": icons.shape[1],
            "columns": min(32, len(icons)),
            "steps": opts.icon_steps,
            "objective": "the cell's mean direction: (v . m) x cos(v, m), v the layer's "
            "vector (the spatial mean, or the centre position for spatial points), m the "
            "cell's mean; Lucent's transforms and Fourier parameterization",
        }
    import torch

    output.write_tensor(out / MEANS, torch.from_numpy(laid.cells.means), "npy")
    labels = [folder_class(PurePosixPath(r)) for r in rels]
    table = write_points(out, sides, laid, rels, labels)
    random = bool(a.loaded.weights.random)
    title = f"atlas: {cmd.model} at {a.plan.key}"
    lines = [
        f"{len(laid.xy):,} points from {laid.images:,} images ({opts.points}); PCA to "
        f"{laid.pca.coords.shape[1]} dimensions, then {laid.reduce}",
        f"{opts.grid} x {opts.grid} cells, those with fewer than {opts.min_count} points "
        f"dropped; supported class: "
        + (
            f"argmax(W . mean + b) of {readout.module}"
            if readout.module
            else "none (no linear readout)"
        ),
    ]
    if len(sides) > 1 and laid.ridge is not None:
        lines.append(
            f"model B ({sides[1].loaded.name} at {sides[1].plan.key}) mapped onto A by ridge "
            f"regression, R\u00b2 {laid.ridge.r2:.3f}"
        )
    lines += [RANDOM_NOTE] if random else []
    what = (
        "feature visualizations of their means"
        if icons is not None
        else "the real image nearest each mean"
    )
    if opts.points.kind == "spatial" and icons is None:
        what = "the real patch nearest each mean"
    pictures = cell_pictures(laid, tiles, tile_index, icons)
    output.write_bytes(
        out / PICTURE,
        atlas_png(
            laid, pictures, cell_frames(laid), title=title, lines=lines, what=what, seed=opts.seed
        ),
    )
    cells = _cells(sides, laid, readout, rels, tile_index, icons is not None)
    record = _record(cmd, opts, sides, laid, readout, cells, failed, rels, icon_record, reused)
    record["seconds"] = round(cmd.seconds(), 3)
    record["forward_seconds"] = round(forward_seconds, 3)
    output.write_json(out / RECORD, record)
    report = None
    if opts.report:
        from actviz.report.atlas import atlas_page

        report = out / PAGE
        output.write_bytes(report, atlas_page(record, _scatter(laid)))
    b = sides[1] if len(sides) > 1 else None
    return AtlasResult(
        model=cmd.model,
        layer=a.plan.key,
        out=out,
        record=out / RECORD,
        picture=out / PICTURE,
        table=table,
        report=report,
        points=len(laid.xy),
        images=laid.images,
        grid=opts.grid,
        min_count=opts.min_count,
        cells=cells,
        readout=readout.describe(),
        colour=laid.coloured.name,
        reduce=opts.reduce,
        weights=a.loaded.weights,
        weights_warning=a.warning,
        against=None
        if b is None
        else {
            **(record.get("against") or {}),
            "weights_info": b.loaded.weights,
            "warning": b.warning,
        },
        failed=[(rels[i], why) for i, why in sorted(failed.items())],
        skipped=list(cmd.found.skipped if cmd.found else []),
        warnings=list(cmd.warnings),
        reused=reused,
        seconds=cmd.seconds(),
        forward_seconds=forward_seconds,
        device=str(a.loaded.device),
    )


def _cells(
    sides: list[Side],
    laid: Laid,
    readout: Readout,
    rels: Sequence[str],
    tile_index: npt.NDArray[np.int64],
    icons: bool,
) -> list[dict[str, Any]]:
    """Each kept cell as ``atlas.json`` lists it."""
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


def _record(
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
    from actviz.atlas.pictures import SPRITE_COLUMNS, TILE
    from actviz.command.session import weights_record

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
        "means": {"file": MEANS, "shape": list(laid.cells.means.shape)},
        "tiles": {"file": TILES, "size": TILE, "columns": SPRITE_COLUMNS},
        "icons": icons,
        "table": POINTS_FILE,
        "picture": PICTURE,
        "report": PAGE if opts.report else None,
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


def _scatter(laid: Laid) -> dict[str, Any]:
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


def earlier_files(out: Path) -> list[str]:
    """The files an earlier atlas wrote in ``out`` (for ``--overwrite``): its journal, the
    parts it lists, and the outputs of the last step."""
    journal = output.Journal(out / JOURNAL)
    names = [JOURNAL, *OUTPUT_FILES]
    try:
        for _, raw in journal.lines():
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(record, dict) and "part" in record:
                names.append(f"{FOLDER}/{record['part']}")
    except OutputError:
        pass
    return names
