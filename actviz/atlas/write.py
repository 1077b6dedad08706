"""What an atlas writes at the end, in order: the tiles, the icons, ``atlas.png``,
``cell-means.npy``, ``points.parquet``, ``atlas.json`` and ``atlas.html``; and the result."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz import output
from actviz.atlas.colours import folder_class
from actviz.atlas.icons import OBJECTIVE, cell_icons
from actviz.atlas.layout import Laid
from actviz.atlas.options import AtlasOptions
from actviz.atlas.pictures import (
    SPRITE_COLUMNS,
    atlas_png,
    cell_frames,
    cell_pictures,
    cut_tiles,
    sprite_png,
)
from actviz.atlas.readout import Readout
from actviz.atlas.record import FILES, atlas_record, cell_entries, scatter_sample
from actviz.atlas.result import AtlasResult
from actviz.atlas.resume import FOLDER, JOURNAL
from actviz.atlas.stream import Side
from actviz.atlas.table import write_points
from actviz.errors import OutputError
from actviz.report.atlas import atlas_page

if TYPE_CHECKING:
    from actviz.command import Command

__all__ = ["OUTPUT_FILES", "RANDOM_NOTE", "earlier_files", "write_outputs"]

#: Every file the last step writes (``--overwrite`` removes them).
OUTPUT_FILES = tuple(str(getattr(FILES, f.name)) for f in dataclasses.fields(FILES))
RANDOM_NOTE = "random weights: an untrained model, so the map shows no learned features"


@dataclass(frozen=True)
class Drawn:
    """What the pictures step made: per cell and rank the tile of its nearest point, and the
    icons' record (None without icons)."""

    tile_index: npt.NDArray[np.int64]
    icons: dict[str, Any] | None


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
    import torch

    out = opts.out
    drawn = _pictures(cmd, opts, sides, laid, readout, paths)
    output.write_tensor(out / FILES.means, torch.from_numpy(laid.cells.means), "npy")
    labels = [folder_class(PurePosixPath(r)) for r in rels]
    write_points(out, sides, laid, rels, labels)
    cells = cell_entries(sides, laid, rels, drawn.tile_index, drawn.icons is not None)
    record = atlas_record(cmd, opts, sides, laid, readout, cells, failed, rels, drawn.icons, reused)
    record["seconds"] = round(cmd.seconds(), 3)
    record["forward_seconds"] = round(forward_seconds, 3)
    output.write_json(out / FILES.record, record)
    if opts.report:
        output.write_bytes(out / FILES.page, atlas_page(record, scatter_sample(laid)))
    return _result(cmd, opts, sides, laid, readout, record, rels, failed, forward_seconds)


def _pictures(
    cmd: Command,
    opts: AtlasOptions,
    sides: list[Side],
    laid: Laid,
    readout: Readout,
    paths: Sequence[Path],
) -> Drawn:
    """The tiles of the cells' nearest points, the icons, and ``atlas.png``."""

    out = opts.out
    tiles, tile_index = cut_tiles(sides, laid, paths, opts)
    output.write_bytes(out / FILES.tiles, sprite_png(tiles))
    icons = None
    record = None
    if opts.icons == "fv" and len(laid.cells.kept):
        icons = cell_icons(sides[0], laid, opts)
        output.write_bytes(out / FILES.icons, sprite_png(icons))
        record = {
            "file": FILES.icons,
            "size": icons.shape[1],
            "columns": min(SPRITE_COLUMNS, len(icons)),
            "steps": opts.icon_steps,
            "objective": OBJECTIVE,
        }
    if icons is not None:
        what = "feature visualizations of their means"
    else:
        what = f"the real {'image' if opts.points.kind == 'pooled' else 'patch'} nearest each mean"
    png = atlas_png(
        laid,
        cell_pictures(laid, tiles, tile_index, icons),
        cell_frames(laid),
        title=f"atlas: {cmd.model} at {sides[0].plan.key}",
        lines=_lines(opts, sides, laid, readout),
        what=what,
        seed=opts.seed,
    )
    output.write_bytes(out / FILES.picture, png)
    return Drawn(tile_index, record)


def _lines(opts: AtlasOptions, sides: list[Side], laid: Laid, readout: Readout) -> list[str]:
    """What ``atlas.png`` says above its pictures."""
    supports = (
        f"argmax(W . mean + b) of {readout.module}"
        if readout.module
        else "none (no linear readout)"
    )
    lines = [
        f"{len(laid.xy):,} points from {laid.images:,} images ({opts.points}); PCA to "
        f"{laid.pca.coords.shape[1]} dimensions, then {laid.reduce}",
        f"{opts.grid} x {opts.grid} cells, those with fewer than {opts.min_count} points "
        f"dropped; supported class: {supports}",
    ]
    if len(sides) > 1 and laid.ridge is not None:
        lines.append(
            f"model B ({sides[1].loaded.name} at {sides[1].plan.key}) mapped onto A by ridge "
            f"regression, R\u00b2 {laid.ridge.r2:.3f}"
        )
    if any(s.loaded.weights.random for s in sides):
        lines.append(RANDOM_NOTE)
    return lines


def _result(
    cmd: Command,
    opts: AtlasOptions,
    sides: list[Side],
    laid: Laid,
    readout: Readout,
    record: Mapping[str, Any],
    rels: Sequence[str],
    failed: Mapping[int, str],
    forward_seconds: float,
) -> AtlasResult:
    a = sides[0]
    b = sides[1] if len(sides) > 1 else None
    out = opts.out
    return AtlasResult(
        model=cmd.model,
        layer=a.plan.key,
        out=out,
        record=out / FILES.record,
        picture=out / FILES.picture,
        table=out / FILES.table,
        report=out / FILES.page if opts.report else None,
        points=len(laid.xy),
        images=laid.images,
        grid=opts.grid,
        min_count=opts.min_count,
        cells=list(record["cells"]),
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
        reused=int(record["images"]["reused"]),
        seconds=cmd.seconds(),
        forward_seconds=forward_seconds,
        device=str(a.loaded.device),
    )


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
