"""Normalisation: checking the data and options, finding value ranges, mapping to levels.

Everything works on whole ``(C, ...)`` arrays at once: per-channel minima, maxima, sort keys
and percentiles of finite values, and the linear map from a range to the palette levels
``0 .. N_LEVELS - 1`` (see :mod:`actviz.render.palette`). NaN and infinities never enter a range;
they are mapped to ``NONFINITE``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.render.palette import N_LEVELS, NONFINITE, U8Array

__all__ = [
    "BoolArray",
    "F32Array",
    "F64Array",
    "as_float32",
    "channel_minmax",
    "check_choice",
    "check_clip",
    "check_value_range",
    "flat_percentiles",
    "map_levels",
    "order_scores",
    "range_is_signed",
    "row_percentiles",
]

# Spans at or below this are treated as a constant map (also keeps 1/span finite in float32).
_TINY_SPAN = 1e-30
# Above this magnitude the mapping arithmetic is done in float64 to avoid float32 overflow.
_HUGE = 1e37

F32Array = npt.NDArray[np.float32]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


# --------------------------------------------------------------------------- input checks


def as_float32(data: npt.ArrayLike, what: str) -> F32Array:
    """``data`` as a float32 array; ValueError naming ``what`` when it is not real-valued."""
    array = np.asarray(data)
    kind = array.dtype.kind
    if kind not in "biuf":
        raise ValueError(f"{what} must hold real numbers, got dtype {array.dtype}")
    if array.dtype != np.float32:
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf
            array = array.astype(np.float32)
    return array


def range_is_signed(lo: float, hi: float) -> bool:
    """True when [lo, hi] has meaningful negative and positive parts."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    tolerance = 1e-6 * max(abs(lo), abs(hi))
    return lo < -tolerance and hi > tolerance


def _check_pair(value: object, name: str) -> tuple[float, float]:
    if not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (low, high), got {value!r}")
    try:
        lo, hi = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return lo, hi


def check_value_range(value_range: object) -> tuple[float, float]:
    """A fixed ``(low, high)`` range as floats; ValueError when it is not one."""
    lo, hi = _check_pair(value_range, "value_range")
    if lo > hi:
        raise ValueError(f"value_range low must not exceed high, got {value_range!r}")
    return lo, hi


def check_clip(clip: object) -> tuple[float, float]:
    """A ``(low, high)`` pair of percentiles as floats; ValueError when it is not one."""
    lo, hi = _check_pair(clip, "clip")
    if not 0.0 <= lo < hi <= 100.0:
        raise ValueError(f"clip must be percentiles with 0 <= low < high <= 100, got {clip!r}")
    return lo, hi


def check_choice(value: object, name: str, choices: tuple[Any, ...]) -> None:
    """ValueError naming ``name`` and the allowed values when ``value`` is not one of them."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


# --------------------------------------------------------------------------- statistics


def channel_minmax(act: F32Array, finite: BoolArray | None) -> tuple[F64Array, F64Array]:
    """Per-channel finite min and max; ``+inf``/``-inf`` for channels with no finite value."""
    axes = tuple(range(1, act.ndim))
    if finite is None:
        lo = act.min(axis=axes)
        hi = act.max(axis=axes)
    else:
        lo = np.min(act, axis=axes, where=finite, initial=np.inf)
        hi = np.max(act, axis=axes, where=finite, initial=-np.inf)
    return lo.astype(np.float64), hi.astype(np.float64)


def order_scores(
    act: F32Array, finite: BoolArray | None, order: str, channel_max: F64Array
) -> F64Array:
    """Per-channel sort keys (higher first); channels with no finite value get ``-inf``."""
    if order == "max":
        return channel_max
    axes = (1, 2)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if finite is None:
            if order == "mean":
                score = act.mean(axis=axes, dtype=np.float64)
            else:
                score = act.std(axis=axes, dtype=np.float64)
        else:
            count = finite.sum(axis=axes)
            zeroed = np.where(finite, act, np.float32(0)).astype(np.float64)
            mean = zeroed.sum(axis=axes) / np.maximum(count, 1)
            if order == "mean":
                score = mean
            else:
                deviation = np.where(finite, zeroed - mean[:, None, None], 0.0)
                score = np.sqrt(np.square(deviation).sum(axis=axes) / np.maximum(count, 1))
            score = np.where(count > 0, score, -np.inf)
    return np.where(np.isnan(score), -np.inf, score)


def _finite_row_percentiles(rows: F32Array, q: tuple[float, float]) -> F64Array:
    """``(k, 2)`` percentiles of rows holding only finite values (linear interpolation).

    Same results as ``np.percentile(rows, q, axis=1)``, faster: one partition at the two
    lower order statistics, then a min-reduction finds each next order statistic.
    """
    width = rows.shape[1]
    positions = [p / 100.0 * (width - 1) for p in q]
    lower = [math.floor(p) for p in positions]
    part = np.partition(rows, sorted(set(lower)), axis=1)
    out = np.empty((rows.shape[0], 2), dtype=np.float64)
    for j, (position, index) in enumerate(zip(positions, lower, strict=True)):
        below = part[:, index].astype(np.float64)
        fraction = position - index
        if fraction > 0 and index + 1 < width:
            # Everything right of a partition point is >= it: the next order statistic
            # is the smallest of those.
            above = part[:, index + 1 :].min(axis=1).astype(np.float64)
            below = below + (above - below) * fraction
        out[:, j] = below
    return out


def _sorted_row_percentiles(rows: F32Array, finite: BoolArray, q: tuple[float, float]) -> F64Array:
    """``(k, 2)`` percentiles of each row's finite values; 0 for rows with none."""
    ordered = np.where(finite, rows, np.float32(np.nan))
    ordered.sort(axis=1)  # NaN sorts last, so the finite values are the first `count`
    count = finite.sum(axis=1)
    last = np.maximum(count - 1, 0)[:, None]
    position = np.asarray(q, dtype=np.float64)[None, :] / 100.0 * last
    below = np.floor(position).astype(np.intp)
    above = np.minimum(below + 1, last)
    fraction = position - below
    v_below = np.take_along_axis(ordered, below, axis=1).astype(np.float64)
    v_above = np.take_along_axis(ordered, above, axis=1).astype(np.float64)
    values = v_below + (v_above - v_below) * fraction
    result: F64Array = np.where(count[:, None] > 0, values, 0.0)
    return result


def row_percentiles(
    rows: F32Array, finite: BoolArray | None, q: tuple[float, float]
) -> tuple[F64Array, F64Array]:
    """Percentiles ``q`` of each row's finite values (linear interpolation); 0 for none."""
    if finite is None:
        both = _finite_row_percentiles(rows, q)
    else:
        clean = finite.all(axis=1)
        both = np.empty((rows.shape[0], 2), dtype=np.float64)
        if clean.any():
            both[clean] = _finite_row_percentiles(rows[clean], q)
        if not clean.all():
            both[~clean] = _sorted_row_percentiles(rows[~clean], finite[~clean], q)
    return both[:, 0], both[:, 1]


def flat_percentiles(
    act: F32Array, finite: BoolArray | None, q: tuple[float, float]
) -> tuple[float, float]:
    """Percentiles ``q`` of all finite values of ``act`` together; ``(0, 0)`` for none."""
    values = act.reshape(1, -1) if finite is None else act[finite].reshape(1, -1)
    if values.size == 0:
        return 0.0, 0.0
    both = _finite_row_percentiles(values, q)
    return float(both[0, 0]), float(both[0, 1])


# --------------------------------------------------------------------------- mapping


def map_levels(
    act: F32Array,
    lo: F64Array,
    hi: F64Array,
    constant: BoolArray,
    neutral: int,
    finite: BoolArray | None,
) -> U8Array:
    """Map each row ``act[i]`` linearly from ``[lo[i], hi[i]]`` to levels ``0 .. N_LEVELS-1``.

    Values outside the range are clamped; rows flagged ``constant`` (or with a degenerate
    range) are drawn at the ``neutral`` level; non-finite pixels become ``NONFINITE``.
    """
    span = hi - lo
    degenerate = constant | ~(span > _TINY_SPAN)
    safe_span = np.where(degenerate, 1.0, span)
    scale = np.where(degenerate, 0.0, (N_LEVELS - 1) / safe_span)
    base = np.where(degenerate, float(neutral), 0.0)
    lo = np.where(degenerate, 0.0, lo)

    extra = (1,) * (act.ndim - 1)
    huge = bool(np.max(np.abs(lo), initial=0.0) > _HUGE or np.max(span, initial=0.0) > _HUGE)
    dtype = np.float64 if huge else np.float32
    values = act if finite is None else np.where(finite, act, np.float32(0))
    with np.errstate(over="ignore", invalid="ignore"):
        levels = np.subtract(values, lo.astype(dtype).reshape(-1, *extra), dtype=dtype)
        levels *= scale.astype(dtype).reshape(-1, *extra)
        levels += base.astype(dtype).reshape(-1, *extra)
        # Round half to even: around the odd CENTER_LEVEL, +v and -v stay mirror images.
        np.rint(levels, out=levels)
        np.clip(levels, 0.0, N_LEVELS - 1, out=levels)
    indices: U8Array = levels.astype(np.uint8)
    if finite is not None:
        indices[~finite] = NONFINITE
    return indices
