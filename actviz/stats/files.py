"""The tables of a run's statistics: the rows of ``stats.csv`` and the ``stats.json`` document.

:func:`stats_rows` flattens every image's layer summaries (and the run's aggregate) into one
row per image and layer with the layer's flag kinds, :func:`to_csv` writes those rows, and
:func:`to_json` nests the same summaries with their flags and thresholds for the report and
``--fail-on``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from actviz.stats.anomalies import FLAG_KINDS, Thresholds, first_bad_layer, flag_anomalies
from actviz.stats.layerstats import STAT_FIELDS

if TYPE_CHECKING:
    from actviz.stats.layerstats import LayerStats

__all__ = ["CSV_FIELDS", "RUN_KEY", "stats_rows", "to_csv", "to_json"]

RUN_KEY = "(all)"
"""The ``image`` of the rows that hold the aggregate over every image of a run."""

CSV_FIELDS: tuple[str, ...] = ("image", "layer", *STAT_FIELDS, "flags")
"""The columns of :func:`stats_rows` and :func:`to_csv`, in order."""

# One shared default: Thresholds is frozen, so sharing it between calls is safe.
_DEFAULT_THRESHOLDS = Thresholds()


def stats_rows(
    per_image: Mapping[str, Sequence[tuple[str, LayerStats]]],
    run: Sequence[tuple[str, LayerStats]] | None = None,
    *,
    thresholds: Thresholds = _DEFAULT_THRESHOLDS,
) -> list[dict[str, Any]]:
    """One flat row per image and layer, then the run's aggregate rows.

    Args:
        per_image: Image key (its output folder, as in the manifest) -> ``(layer, stats)``
            in depth order.
        run: The aggregate per layer, in depth order, or None. Its rows have the image
            :data:`RUN_KEY` (``"(all)"``).
        thresholds: For the ``flags`` column.

    Returns:
        Dicts with the keys :data:`CSV_FIELDS`: JSON-safe values (None for NaN) and
        ``flags``, the layer's flag kinds joined by ``;`` (empty when none).
    """
    rows: list[dict[str, Any]] = []
    groups = list(per_image.items())
    if run is not None:
        groups.append((RUN_KEY, run))
    for image, layers in groups:
        kinds: dict[str, list[str]] = {}
        for flag in flag_anomalies(layers, thresholds):
            kinds.setdefault(flag.layer, []).append(flag.kind)
        for name, s in layers:
            data = s.to_dict()
            row: dict[str, Any] = {"image": image, "layer": name}
            row.update({key: data[key] for key in STAT_FIELDS})
            row["flags"] = ";".join(kinds.get(name, []))
            rows.append(row)
    return rows


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``stats.csv``: a header row of :data:`CSV_FIELDS`, then the rows; None is empty."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: row.get(key) for key in CSV_FIELDS})
    return buffer.getvalue()


def to_json(
    per_image: Mapping[str, Sequence[tuple[str, LayerStats]]],
    run: Sequence[tuple[str, LayerStats]] | None = None,
    *,
    thresholds: Thresholds = _DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """``stats.json``: every image's layers and flags, and the run's.

    Args:
        per_image: Image key (its manifest ``out_dir``) -> ``(layer, stats)`` in depth order.
        run: The aggregate per layer in depth order, or None.
        thresholds: Used for the flags, and recorded.

    Returns:
        ``{"format": 1, "flag_kinds": [...], "thresholds": {...},
        "images": {key: {"layers": [{"name": ..., **LayerStats.to_dict()}, ...],
        "flags": [{"layer", "kind", "message"}, ...], "first_nonfinite": name or None}},
        "run": same shape as one image, or None}``.
    """

    def section(layers: Sequence[tuple[str, LayerStats]]) -> dict[str, Any]:
        flags = flag_anomalies(layers, thresholds)
        return {
            "layers": [{"name": name, **s.to_dict()} for name, s in layers],
            "flags": [f.to_dict() for f in flags],
            "first_nonfinite": first_bad_layer(flags),
        }

    return {
        "format": 1,
        "flag_kinds": list(FLAG_KINDS),
        "thresholds": asdict(thresholds),
        "images": {key: section(layers) for key, layers in per_image.items()},
        "run": section(run) if run is not None else None,
    }
