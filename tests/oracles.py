"""Reference computations the tests check the library against.

Each is the direct, unoptimized form of something the library does another way: pooling
statistics in one go (``RunningStats`` streams them), the CSV rows and the ``stats.json``
document built from every summary at once (``StatsTable`` and ``RunningStats.to_json`` write
them as the images arrive), linear CKA on one group of features (``LayerComparison`` streams it
over minibatches), and every row of ``stats.parquet`` read back whole. Nothing in ``actviz``
calls them.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.diff.metrics import biased_hsic, unbiased_hsic
from actviz.errors import OutputError, first_line
from actviz.models.registry import list_models
from actviz.statistics import (
    CSV_FIELDS,
    FLAG_KINDS,
    RUN_KEY,
    STAT_FIELDS,
    LayerStats,
    Thresholds,
    first_bad_layer,
    flag_anomalies,
)
from actviz.statistics.table import TABLE_FORMAT

# One shared default: Thresholds is frozen, so sharing it between calls is safe.
_DEFAULT_THRESHOLDS = Thresholds()


# ---------------------------------------------------------------- statistics


def aggregate(stats: Sequence[LayerStats]) -> LayerStats:
    """Pool one layer's per-image statistics over a run.

    Moments are exact: the mean is weighted by each image's finite count and the standard
    deviation is the pooled population one (within-image variance plus the spread of the
    image means). Min and max are the extremes of the images', fractions are weighted by
    element count, NaN and Inf counts are summed. Percentiles are the finite-count-weighted
    mean of the per-image percentiles: an approximation, since the values themselves are
    not kept. A channel is dead in the aggregate only when it is dead in every image.

    Args:
        stats: The same layer's statistics for each image (at least one).

    Returns:
        The pooled statistics.

    Raises:
        ValueError: If ``stats`` is empty or the images disagree on the number of channels.
    """
    if not stats:
        raise ValueError("aggregate needs the statistics of at least one image")
    channels = {s.channels for s in stats}
    if len(channels) != 1:
        raise ValueError(f"cannot pool a layer whose channel counts differ: {sorted(channels)}")
    count = sum(s.count for s in stats)
    nan = sum(s.nan for s in stats)
    inf = sum(s.inf for s in stats)
    useful = [s for s in stats if s.finite > 0 and math.isfinite(s.mean)]
    finite = sum(s.finite for s in useful)
    if finite:
        mean = sum(s.finite * s.mean for s in useful) / finite
        var = sum(s.finite * (s.std**2 + (s.mean - mean) ** 2) for s in useful) / finite
        std = math.sqrt(var)
        lo = min(s.min for s in useful)
        hi = max(s.max for s in useful)
        p01 = sum(s.finite * s.p01 for s in useful) / finite
        p99 = sum(s.finite * s.p99 for s in useful) / finite
    else:
        mean = std = lo = hi = p01 = p99 = math.nan
    counted = [s for s in stats if s.count > 0]
    if counted:
        zero_frac = sum(s.count * s.zero_frac for s in counted) / count
        neg_frac = sum(s.count * s.neg_frac for s in counted) / count
    else:
        zero_frac = neg_frac = math.nan
    dead_sets = [set(s.dead_indices) for s in stats]
    dead = tuple(sorted(set.intersection(*dead_sets)))
    (width,) = channels
    return LayerStats(
        count=count,
        mean=mean,
        std=std,
        min=lo,
        max=hi,
        p01=p01,
        p99=p99,
        zero_frac=zero_frac,
        neg_frac=neg_frac,
        nan=nan,
        inf=inf,
        channels=width,
        dead_channels=len(dead),
        dead_frac=len(dead) / width if width else math.nan,
        dead_indices=dead,
    )


def aggregate_run(
    per_image: Mapping[str, Sequence[tuple[str, LayerStats]]],
) -> list[tuple[str, LayerStats]]:
    """The run's aggregate of every layer, in the order the layers were first captured.

    A layer is pooled over the images that have it. A layer whose channel count differs
    between images cannot be pooled and is left out.

    Args:
        per_image: Image key -> ``(layer, stats)`` in depth order.

    Returns:
        ``(layer, pooled stats)`` in depth order.
    """
    by_layer: dict[str, list[LayerStats]] = {}
    for layers in per_image.values():
        for name, s in layers:
            by_layer.setdefault(name, []).append(s)
    return [
        (name, aggregate(group))
        for name, group in by_layer.items()
        if len({s.channels for s in group}) == 1
    ]


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


# ---------------------------------------------------------------- diff


def linear_cka(x: npt.ArrayLike, y: npt.ArrayLike, *, unbiased: bool = True) -> float:
    """Linear CKA of two feature matrices ``(n, dx)`` and ``(n, dy)`` in one group, in float64.

    A direct reference computation (no streaming, no special cases): NaN when a side has no
    variation. :class:`LayerComparison` is what a diff uses.
    """
    a = np.asarray(x, dtype=np.float64).reshape(np.shape(x)[0], -1)
    b = np.asarray(y, dtype=np.float64).reshape(np.shape(y)[0], -1)
    k, lm = a @ a.T, b @ b.T
    hsic = unbiased_hsic if unbiased else biased_hsic
    with np.errstate(invalid="ignore", divide="ignore"):
        return hsic(k, lm) / math.sqrt(hsic(k, k) * hsic(lm, lm))


# ---------------------------------------------------------------- models


def list_model_names(
    pattern: str | None = None, *, include_all: bool = False, source: str = "torchvision"
) -> list[str]:
    """The names of :func:`list_models`."""
    return [e.name for e in list_models(pattern, include_all=include_all, source=source)]


def read_table_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a ``stats.parquet`` as a dict (null -> None).

    Raises:
        OutputError: If the file cannot be read or was not written by this format.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowInvalid) as exc:
        raise OutputError(
            f"cannot read {path}: {first_line(exc)}; run the command again to write it"
        ) from None
    found = (table.schema.metadata or {}).get(b"actviz.format")
    if found != TABLE_FORMAT.encode():
        raise OutputError(
            f"{path} is not an actviz statistics table of format {TABLE_FORMAT} "
            f"(found {found!r}); run the command again to write it"
        )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


# ---------------------------------------------------------------- the atlas


def knn_accuracy(points: npt.ArrayLike, labels: npt.ArrayLike, k: int = 5) -> float:
    """Leave-one-out accuracy of a ``k``-nearest-neighbour vote in ``points`` (ties: the
    smallest label)."""
    x = np.asarray(points, np.float64)
    y = np.asarray(labels)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d, np.inf)
    right = 0
    for i in range(len(x)):
        near = y[np.argsort(d[i], kind="stable")[:k]]
        values, counts = np.unique(near, return_counts=True)
        right += int(values[np.argmax(counts)] == y[i])
    return right / len(x)


def trustworthiness(high: npt.ArrayLike, low: npt.ArrayLike, k: int = 10) -> float:
    """Venna and Kaski's trustworthiness of the embedding ``low`` of ``high`` at ``k``
    neighbours: 1 minus the penalized ranks (in the original space) of the points that are
    among a point's ``k`` nearest in the embedding but not in the original."""
    x = np.asarray(high, np.float64)
    z = np.asarray(low, np.float64)
    n = len(x)
    dx = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    dz = ((z[:, None, :] - z[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(dx, np.inf)
    np.fill_diagonal(dz, np.inf)
    rank = np.empty((n, n), np.int64)
    order = np.argsort(dx, axis=1, kind="stable")
    rank[np.arange(n)[:, None], order] = np.arange(1, n + 1)[None, :]
    penalty = 0.0
    for i in range(n):
        for j in np.argsort(dz[i], kind="stable")[:k]:
            penalty += max(0, rank[i, j] - k)
    return 1.0 - 2.0 / (n * k * (2 * n - 3 * k - 1)) * penalty


def cell_means_brute(
    xy01: npt.ArrayLike, vectors: npt.ArrayLike, grid: int
) -> dict[int, tuple[int, npt.NDArray[np.float64]]]:
    """Every non-empty cell of a ``grid x grid`` binning of the unit square: its count and
    the mean of its vectors, point by point."""
    xy = np.asarray(xy01, np.float64)
    v = np.asarray(vectors, np.float64)
    sums: dict[int, list[Any]] = {}
    for (x, y), vector in zip(xy, v, strict=True):
        col = min(int(x * grid), grid - 1)
        row = min(int(y * grid), grid - 1)
        entry = sums.setdefault(row * grid + col, [0, np.zeros(v.shape[1])])
        entry[0] += 1
        entry[1] = entry[1] + vector
    return {cell: (count, total / count) for cell, (count, total) in sums.items()}
