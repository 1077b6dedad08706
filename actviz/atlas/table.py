"""``points.parquet``: one row per point, every point (the page draws a sample; this table and
the counts never do)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actviz import output
from actviz.atlas.layout import Laid
from actviz.atlas.stream import Side

__all__ = ["POINTS_FILE", "write_points"]

POINTS_FILE = "points.parquet"
_ROWS = 1 << 16


def _schema(laid: Laid, against: bool) -> Any:
    import pyarrow as pa

    fields = [pa.field("image", pa.string())]
    if against:
        fields.append(pa.field("model", pa.string()))
    fields += [
        pa.field("row", pa.int32()),
        pa.field("col", pa.int32()),
        pa.field("x", pa.float32()),
        pa.field("y", pa.float32()),
        pa.field("cell", pa.int32()),
        pa.field("kept", pa.bool_()),
        pa.field("label", pa.string()),
        pa.field("prediction", pa.int32()),
        pa.field("prediction_name", pa.string()),
    ]
    if laid.coloured.kind == "continuous":
        fields.append(pa.field(laid.coloured.name.replace(":", "_"), pa.float32()))
    return pa.schema(fields)


def write_points(
    out: Path,
    sides: Sequence[Side],
    laid: Laid,
    rels: Sequence[str],
    labels: Sequence[str | None],
) -> Path:
    """Write the table; its path.

    Columns: ``image``; ``model`` (A or B, with a second model); ``row`` and ``col`` of a
    spatial point's map position (null for a pooled one); ``x``, ``y`` in the unit square
    (y down, as drawn); ``cell`` (``row * grid + col`` of the grid); ``kept`` (its cell holds
    enough points to be drawn); ``label`` (the image's class folder); ``prediction`` and its
    name; and the unit's value when the points are coloured by one.
    """
    import pyarrow as pa

    against = len(sides) > 1
    schema = _schema(laid, against)
    kept = np.zeros(laid.cells.grid**2, bool)
    kept[laid.cells.kept] = True
    names = list(sides[0].loaded.categories or [])
    path = out / POINTS_FILE
    table = output.ParquetParts(path, schema, compression="zstd")
    try:
        for start in range(0, len(laid.image), _ROWS):
            end = min(start + _ROWS, len(laid.image))
            image = laid.image[start:end]
            side = laid.side[start:end]
            position = laid.position[start:end]
            width = np.asarray([sides[int(s)].plan.width for s in side], np.int64)
            spatial = position >= 0
            prediction = np.asarray(
                [sides[int(s)].predictions[int(i)] for s, i in zip(side, image, strict=True)],
                np.int64,
            )
            columns: dict[str, Any] = {"image": [rels[int(i)] for i in image]}
            if against:
                columns["model"] = ["A" if s == 0 else "B" for s in side]
            columns |= {
                "row": pa.array(
                    np.where(spatial, position // np.maximum(width, 1), 0),
                    pa.int32(),
                    mask=~spatial,
                ),
                "col": pa.array(
                    np.where(spatial, position % np.maximum(width, 1), 0), pa.int32(), mask=~spatial
                ),
                "x": laid.xy[start:end, 0],
                "y": laid.xy[start:end, 1],
                "cell": laid.cells.cell[start:end].astype(np.int32),
                "kept": kept[laid.cells.cell[start:end]],
                "label": [labels[int(i)] for i in image],
                "prediction": pa.array(
                    prediction.astype(np.int32), pa.int32(), mask=prediction < 0
                ),
                "prediction_name": [
                    (names[p] if p < len(names) else f"class {p}") if p >= 0 else None
                    for p in prediction.tolist()
                ],
            }
            if laid.coloured.kind == "continuous":
                columns[schema.names[-1]] = np.asarray(laid.coloured.values[start:end], np.float32)
            table.write(pa.RecordBatch.from_pydict(columns, schema=schema))
        table.finish()
    except BaseException:
        table.abort()
        raise
    return path
