"""Which channels a grid shows, and on which scale: each channel's finite range, the channels
chosen by index or score, one range for the layer (or a fixed one) or one per channel, and
the header's words for it. Pure numpy; :mod:`actviz.render.grid` puts the picture together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from actviz.render.legend import fmt_value
from actviz.render.normalize import (
    BoolArray,
    F32Array,
    F64Array,
    as_float32,
    channel_minmax,
    flat_percentiles,
    map_levels,
    order_scores,
    row_percentiles,
)
from actviz.render.palette import U8Array

__all__ = [
    "Chosen",
    "Ranges",
    "Scale",
    "channel_ranges",
    "channel_scale",
    "choose_channels",
    "layer_scale",
    "prefix_band_levels",
]


@dataclass(frozen=True)
class Ranges:
    """Each channel's finite range, and the layer's (0 to 0 where nothing is finite)."""

    channel_lo: F64Array
    channel_hi: F64Array
    has_finite: BoolArray
    layer_lo: float
    layer_hi: float


@dataclass(frozen=True)
class Chosen:
    """The channels a grid shows, in display order, and their maps."""

    ids: npt.NDArray[np.intp]
    maps: F32Array
    finite: BoolArray | None  # None when every shown value is finite
    count: int


@dataclass(frozen=True)
class Scale:
    """How the shown channels' values map to colours, and how the header says so."""

    row_lo: F64Array
    row_hi: F64Array
    constant: BoolArray
    vmin: float
    vmax: float
    norm: str
    description: str
    range_text: str
    labels: tuple[str, ...]


def channel_ranges(array: F32Array, finite: BoolArray | None) -> Ranges:
    channel_lo, channel_hi = channel_minmax(array, finite)
    has_finite = channel_lo <= channel_hi
    layer_lo = float(channel_lo[has_finite].min()) if has_finite.any() else 0.0
    layer_hi = float(channel_hi[has_finite].max()) if has_finite.any() else 0.0
    return Ranges(channel_lo, channel_hi, has_finite, layer_lo, layer_hi)


def choose_channels(
    array: F32Array,
    finite: BoolArray | None,
    ranges: Ranges,
    max_channels: int,
    order: str,
    channels: Sequence[int] | None,
) -> Chosen:
    """The given ``channels``, or the first ``max_channels`` by index or by score."""
    total = array.shape[0]
    shown_count = total if max_channels <= 0 else min(total, max_channels)
    if channels is not None:
        ids = np.asarray(channels, dtype=np.intp).reshape(-1)
        if ids.size == 0 or ids.min() < 0 or ids.max() >= total:
            raise ValueError(f"channels must be a non-empty list of indices below {total}")
        shown_count = int(ids.size)
        shown = array[ids]
        shown_finite = None if finite is None else finite[ids]
    elif order == "index":
        ids = np.arange(shown_count)
        shown = array[:shown_count]
        shown_finite = None if finite is None else finite[:shown_count]
    else:
        score = order_scores(array, finite, order, ranges.channel_hi)
        ids = np.argsort(-score, kind="stable")[:shown_count]
        shown = array[ids]
        shown_finite = None if finite is None else finite[ids]
    if shown_finite is not None and bool(shown_finite.all()):
        shown_finite = None
    return Chosen(ids, shown, shown_finite, shown_count)


def layer_scale(
    array: F32Array,
    finite: BoolArray | None,
    ranges: Ranges,
    count: int,
    shared: tuple[float, float] | None,
    percentiles: tuple[float, float] | None,
    centred: bool,
) -> Scale:
    """One range for every channel: the fixed one, or the layer's (clipped) range."""
    clip_text = f", clipped to p{percentiles[0]:g}-p{percentiles[1]:g}" if percentiles else ""
    how = "symmetric about 0" if centred else "min-max"
    if shared is not None:
        lo, hi = shared
        norm_used, description = "shared", "shared range"
    else:
        if percentiles is not None:
            lo, hi = flat_percentiles(array, finite, percentiles)
        else:
            lo, hi = ranges.layer_lo, ranges.layer_hi
        norm_used, description = "layer", f"per-layer {how}{clip_text}"
    if centred:
        magnitude = max(abs(lo), abs(hi))
        lo, hi = -magnitude, magnitude
    if centred:
        labels: tuple[str, ...] = (fmt_value(lo), "0", "+" + fmt_value(hi))
    else:
        labels = (fmt_value(lo), fmt_value(hi))
    return Scale(
        row_lo=np.full(count, lo),
        row_hi=np.full(count, hi),
        constant=np.zeros(count, dtype=bool),
        vmin=lo,
        vmax=hi,
        norm=norm_used,
        description=description,
        range_text=f"range [{fmt_value(lo)}, {fmt_value(hi)}]",
        labels=labels,
    )


def channel_scale(
    ranges: Ranges,
    chosen: Chosen,
    percentiles: tuple[float, float] | None,
    centred: bool,
) -> Scale:
    """Each shown channel its own (clipped) range."""
    clip_text = f", clipped to p{percentiles[0]:g}-p{percentiles[1]:g}" if percentiles else ""
    how = "symmetric about 0" if centred else "min-max"
    ids, count = chosen.ids, chosen.count
    shown_has = ranges.has_finite[ids]
    raw_lo = np.where(shown_has, ranges.channel_lo[ids], 0.0)
    raw_hi = np.where(shown_has, ranges.channel_hi[ids], 0.0)
    if percentiles is not None:
        rows = chosen.maps.reshape(count, -1)
        rows_finite = None if chosen.finite is None else chosen.finite.reshape(count, -1)
        row_lo, row_hi = row_percentiles(rows, rows_finite, percentiles)
    else:
        row_lo, row_hi = raw_lo, raw_hi
    if centred:
        magnitude_c = np.maximum(np.abs(row_lo), np.abs(row_hi))
        row_lo, row_hi = -magnitude_c, magnitude_c
    if shown_has.any():
        vmin, vmax = float(row_lo[shown_has].min()), float(row_hi[shown_has].max())
    else:
        vmin = vmax = 0.0
    if percentiles is not None:
        p_lo, p_hi = f"p{percentiles[0]:g}", f"p{percentiles[1]:g}"
        labels = ("-|p|", "0", "+|p|") if centred else (f"ch {p_lo}", f"ch {p_hi}")
    else:
        labels = ("-|max|", "0", "+|max|") if centred else ("ch min", "ch max")
    return Scale(
        row_lo=row_lo,
        row_hi=row_hi,
        constant=raw_lo == raw_hi,
        vmin=vmin,
        vmax=vmax,
        norm="channel",
        description=f"per-channel {how}{clip_text}",
        range_text=f"layer range [{fmt_value(ranges.layer_lo)}, {fmt_value(ranges.layer_hi)}]",
        labels=labels,
    )


def prefix_band_levels(
    prefix: npt.ArrayLike, total: int, ids: npt.NDArray[np.intp], scale: Scale, neutral: int
) -> U8Array:
    """The prefix values of the shown channels as levels, on their tiles' scales."""
    extra = as_float32(prefix, "prefix")
    if extra.ndim != 2 or extra.shape[0] != total or extra.shape[1] == 0:
        raise ValueError(f"prefix must be a ({total}, P) array, got shape {extra.shape}")
    extra = extra[ids]
    extra_finite = np.isfinite(extra)
    return map_levels(
        extra[:, None, :],
        scale.row_lo,
        scale.row_hi,
        scale.constant,
        neutral,
        None if bool(extra_finite.all()) else extra_finite[:, None, :],
    )[:, 0, :]
