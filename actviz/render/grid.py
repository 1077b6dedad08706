"""Rendering of one image's activations as an 8-bit palette picture.

The input is a plain numpy array, ``(C, H, W)`` for a feature map or ``(C,)`` for a vector
(pooled features, logits). The output is a :class:`~actviz.render.palette.GridImage`: a ``(H, W)``
array of palette indices plus a 256-entry RGB palette, ready to be written as a mode ``"P"``
PNG.

This module decides what a picture shows (which channels, which range, which colormap) and
puts it together from the pieces that draw it:

* :mod:`actviz.render.palette`: the palette layout, colormap tables and :class:`GridImage`;
* :mod:`actviz.render.normalize`: input checks, value ranges, percentiles and level mapping;
* :mod:`actviz.render.tiling`: channels laid out as a grid of tiles;
* :mod:`actviz.render.legend`: the header text and colour bar.

Everything is vectorised over channels, and the header is drawn once per picture. Nothing here
writes files or imports ``matplotlib.pyplot``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from actviz.render.legend import (
    Header,
    fmt_value,
    line_height,
    new_canvas,
    paste_text,
    text_width,
)
from actviz.render.normalize import (
    BoolArray,
    as_float32,
    channel_minmax,
    check_choice,
    check_clip,
    check_value_range,
    map_levels,
    range_is_signed,
)
from actviz.render.normalize import F32Array as F32Array
from actviz.render.normalize import F64Array as F64Array
from actviz.render.palette import (
    BACKGROUND,
    CENTER_LEVEL,
    GridImage,
    choose_cmap,
    colormap_lut,
    palette_for,
)
from actviz.render.palette import U8Array as U8Array
from actviz.render.scales import (
    Chosen,
    Scale,
    channel_ranges,
    channel_scale,
    choose_channels,
    layer_scale,
    prefix_band_levels,
)
from actviz.render.theme import ROW_LABEL_SIZE
from actviz.render.tiling import GAP, TileLayout, body_shape, tile_grid, tile_layout

# The array type aliases (U8Array, F32Array, F64Array) are imported as themselves above so that
# annotations can keep taking them from this module; they are not part of the API.
__all__ = [
    "Norm",
    "Order",
    "render_grid",
    "render_vector",
]

Order = Literal["index", "mean", "max", "std"]
"""Which channels a capped grid shows, in which order: by index, or by descending score."""
Norm = Literal["channel", "layer"]

# render_vector layout (pixels).
_CELL = 11
_CELL_PITCH = 12


def render_grid(
    act: npt.ArrayLike,
    *,
    title: str,
    max_channels: int = 64,
    order: Order = "index",
    norm: Norm = "channel",
    value_range: tuple[float, float] | None = None,
    clip: tuple[float, float] | None = None,
    cmap: str | None = None,
    min_tile: int = 32,
    columns: int | None = None,
    channels: Sequence[int] | None = None,
    channels_note: str | None = None,
    notes: Sequence[str] = (),
    channel_names: Sequence[str] | None = None,
    prefix: npt.ArrayLike | None = None,
    unit: str = "channel",
) -> GridImage:
    """Draw a feature map as a grid of tiles, one per channel, under a header.

    Args:
        act: ``(C, H, W)`` real array for one image; ``(H, W)`` is treated as one channel.
            Integer and bool arrays are converted to float32.
        title: First header line, e.g. ``"layer1.0.conv1  Conv2d  (1, 64, 56, 56)"``.
        max_channels: Show at most this many channels; 0 or negative shows all.
        order: Which channels are shown when capped, and their order: ``"index"``, or by
            descending per-channel ``"mean"``, ``"max"`` or ``"std"`` of finite values.
        norm: ``"channel"`` maps each channel's own range to the colormap; ``"layer"``
            uses one range for the whole layer (all channels, shown or not).
        value_range: Fixed ``(low, high)`` for every channel; overrides ``norm`` and
            ``clip``, so several pictures can share one scale.
        clip: Percentiles ``(low, high)``, e.g. ``(1, 99)``: the range is taken between
            these percentiles, per channel or per layer according to ``norm``.
        cmap: Matplotlib colormap name. None picks ``"viridis"`` for non-negative data and
            ``"RdBu_r"`` centred on 0 for signed data. A named diverging map (``RdBu``,
            ``coolwarm``, ``bwr`` ...) is also centred on 0 when the data is signed.
        min_tile: Small maps are upscaled by an integer factor (nearest neighbour) until
            their longer side is at least this many pixels.
        columns: Tiles per row; None uses ``ceil(sqrt(k))``.
        channels: Exactly these channels, in this order, instead of choosing them with
            ``order`` and ``max_channels``: a choice made once for several pictures (for
            example ranked over every image of a run) so that they show the same channels.
        channels_note: How ``channels`` were chosen, for the header
            (e.g. ``"sorted by max over 6 images"``).
        notes: Further header lines (how the output was laid out, random weights, ...);
            long lines wrap to the picture's width.
        channel_names: A name per channel (a segmentation head's classes): each tile is
            labelled ``index name`` instead of its index alone.
        prefix: ``(C, P)`` values drawn apart from the maps (a token layer's class and
            register tokens): a band of P squares above each tile, on that tile's scale.
        unit: What one tile is, for the header's count: ``"channel"`` (``"12 of 64
            channels"``), or ``"head"`` for an attention map's heads.

    Returns:
        The picture and a description of what it shows.

    Raises:
        ValueError: A malformed array, an unknown colormap, or an invalid option.

    Centred (signed) pictures map ``[-m, m]`` with ``m = max|x|``, so 0 is the centre
    colour. With per-channel normalisation a constant channel (max == min, e.g. all zero)
    is drawn at level 0, or at the centre level when centred. NaN and infinite pixels are
    drawn in ``NONFINITE`` and ignored when computing ranges and sort keys. Every tile has
    its channel index above it.
    """
    array = _feature_maps(act)
    shared, percentiles = _check_options(order, norm, value_range, clip, min_tile, columns, cmap)
    total, height, width = array.shape
    finite_all = np.isfinite(array)
    finite: BoolArray | None = None if bool(finite_all.all()) else finite_all
    ranges = channel_ranges(array, finite)
    chosen = choose_channels(array, finite, ranges, max_channels, order, channels)

    data_lo, data_hi = shared if shared is not None else (ranges.layer_lo, ranges.layer_hi)
    cmap_name, centred = choose_cmap(cmap, range_is_signed(data_lo, data_hi))
    neutral = CENTER_LEVEL if centred else 0
    if shared is not None or norm == "layer":
        scale = layer_scale(array, finite, ranges, chosen.count, shared, percentiles, centred)
    else:
        scale = channel_scale(ranges, chosen, percentiles, centred)

    levels = map_levels(
        chosen.maps, scale.row_lo, scale.row_hi, scale.constant, neutral, chosen.finite
    )
    prefix_levels = (
        None if prefix is None else prefix_band_levels(prefix, total, chosen.ids, scale, neutral)
    )

    upscale = max(1, math.ceil(min_tile / max(height, width)))
    columns_used = min(columns, chosen.count) if columns else math.ceil(math.sqrt(chosen.count))
    tile_labels = _tile_labels(chosen.ids, channel_names)
    tokens = 0 if prefix_levels is None else int(prefix_levels.shape[1])
    placed = tile_layout(height * upscale, width * upscale, tile_labels, tokens)
    body_h, body_w = body_shape(chosen.count, columns_used, placed)

    count_text = f"{chosen.count} of {total} {unit}{'' if total == 1 else 's'}"
    if channels is not None:
        count_text += f", {channels_note}" if channels_note else ""
    elif order != "index":
        count_text += f", sorted by {order}"
    header = Header(
        title=title,
        info=f"{count_text}  |  {scale.description}  |  {scale.range_text}",
        labels=scale.labels,
        nonfinite=chosen.finite is not None,
        notes=tuple(notes),
    )
    canvas, header_height = new_canvas(body_h, body_w, header)
    tile_grid(
        levels,
        columns_used,
        upscale,
        tile_labels,
        out=canvas[header_height:, :body_w],
        prefix=prefix_levels,
    )
    return tiled_image(
        canvas,
        header_height=header_height,
        chosen=chosen,
        total=total,
        scale=scale,
        cmap_name=cmap_name,
        centred=centred,
        tile_shape=(height * upscale, width * upscale),
        grid_shape=(-(-chosen.count // columns_used), columns_used),
        upscale=upscale,
        placed=placed,
    )


def tiled_image(
    canvas: U8Array,
    *,
    header_height: int,
    chosen: Chosen,
    total: int,
    scale: Scale,
    cmap_name: str,
    centred: bool,
    tile_shape: tuple[int, int],
    grid_shape: tuple[int, int],
    upscale: int,
    placed: TileLayout,
) -> GridImage:
    """The finished picture of tiled channel maps (a grid or a video's time strips), frozen,
    with what it shows."""
    canvas.setflags(write=False)
    return GridImage(
        indices=canvas,
        palette=palette_for(cmap_name),
        channels_shown=chosen.count,
        channels_total=total,
        channel_ids=tuple(int(i) for i in chosen.ids),
        vmin=float(scale.vmin),
        vmax=float(scale.vmax),
        cmap=cmap_name,
        signed=centred,
        norm=scale.norm,
        header_height=header_height,
        tile_shape=tile_shape,
        grid_shape=grid_shape,
        upscale=upscale,
        label_height=placed.label_height,
        pitch=placed.pitch,
    )


# ---------------------------------------------------------------------- render_grid's steps
# (which channels, and on which scale: actviz.render.scales)


def _feature_maps(act: npt.ArrayLike) -> F32Array:
    """``act`` as a non-empty float32 ``(C, H, W)`` array (``(H, W)`` is one channel)."""
    array = as_float32(act, "act")
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3:
        raise ValueError(
            f"act must be a (C, H, W) or (H, W) array for one image, got shape {array.shape}"
        )
    if 0 in array.shape:
        raise ValueError(f"act must not be empty, got shape {array.shape}")
    return array


def _check_options(
    order: str,
    norm: str,
    value_range: tuple[float, float] | None,
    clip: tuple[float, float] | None,
    min_tile: int,
    columns: int | None,
    cmap: str | None,
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """Check the options; the fixed range, and the clip percentiles unless a fixed range
    overrides them."""
    check_choice(order, "order", get_args(Order))
    check_choice(norm, "norm", get_args(Norm))
    shared = check_value_range(value_range) if value_range is not None else None
    percentiles = check_clip(clip) if clip is not None and shared is None else None
    if min_tile < 0:
        raise ValueError(f"min_tile must be >= 0, got {min_tile}")
    if columns is not None and columns < 1:
        raise ValueError(f"columns must be >= 1 or None, got {columns}")
    if cmap is not None:
        colormap_lut(cmap)  # raises ValueError for an unknown name
    return shared, percentiles


def _tile_labels(ids: npt.NDArray[np.intp], names: Sequence[str] | None) -> list[str]:
    """Each tile's label: its channel index, and its name when there is one."""
    return [
        f"{int(i)} {names[int(i)]}" if names is not None and int(i) < len(names) else str(int(i))
        for i in ids
    ]


def render_vector(
    values: npt.ArrayLike,
    *,
    title: str,
    cmap: str | None = None,
    max_values: int = 4096,
    value_range: tuple[float, float] | None = None,
    notes: Sequence[str] = (),
) -> GridImage:
    """Draw a vector (pooled features, logits) as a heat strip wrapped into rows.

    Cells are 11 px squares on a 12 px pitch, 32 per row for up to 256 values and 64 per
    row beyond; each row is labelled on the left with the index of its first value. One
    range is used for the whole vector (``norm == "layer"``); signed data with the auto
    colormap is centred on 0 like :func:`render_grid`.

    Args:
        values: ``(C,)`` real array. Arrays with a single non-trivial axis, such as
            ``(1, C)`` or ``(C, 1, 1)``, are flattened.
        title: First header line.
        cmap: Matplotlib colormap name, or None for the automatic choice.
        max_values: Show the first this many values; 0 or negative shows all.
        value_range: Fixed ``(low, high)`` instead of the vector's own range, so several
            strips can share one scale.
        notes: Further header lines, wrapped to the picture's width.

    Returns:
        The picture; ``channels_total`` is C and ``tile_shape`` the size of one cell.

    Raises:
        ValueError: A malformed array or an unknown colormap.
    """
    array = as_float32(values, "values")
    if array.ndim != 1:
        if sum(1 for n in array.shape if n != 1) > 1 or array.ndim == 0:
            raise ValueError(f"values must be a (C,) vector, got shape {array.shape}")
        array = array.reshape(-1)
    if array.size == 0:
        raise ValueError("values must not be empty")
    if cmap is not None:
        colormap_lut(cmap)

    total = int(array.shape[0])
    shown_count = total if max_values <= 0 else min(total, max_values)
    finite_all = np.isfinite(array)
    finite: BoolArray | None = None if bool(finite_all.all()) else finite_all
    lo_all, hi_all = channel_minmax(array[None], None if finite is None else finite[None])
    lo, hi = (float(lo_all[0]), float(hi_all[0])) if lo_all[0] <= hi_all[0] else (0.0, 0.0)
    if value_range is not None:
        lo, hi = check_value_range(value_range)

    signed_data = range_is_signed(lo, hi)
    cmap_name, centred = choose_cmap(cmap, signed_data)
    if centred:
        magnitude = max(abs(lo), abs(hi))
        lo, hi = -magnitude, magnitude
    shown = array[:shown_count]
    shown_finite = None if finite is None else finite[:shown_count]
    if shown_finite is not None and bool(shown_finite.all()):
        shown_finite = None
    levels = map_levels(
        shown[None],
        np.array([lo]),
        np.array([hi]),
        np.zeros(1, dtype=bool),
        CENTER_LEVEL if centred else 0,
        None if shown_finite is None else shown_finite[None],
    )[0]

    per_row = 32 if shown_count <= 256 else 64
    per_row = min(per_row, shown_count)
    rows = -(-shown_count // per_row)
    padded = np.full(rows * per_row, BACKGROUND, dtype=np.uint8)
    padded[:shown_count] = levels
    cells = np.full((rows, _CELL_PITCH, per_row, _CELL_PITCH), BACKGROUND, dtype=np.uint8)
    cells[:, :_CELL, :, :_CELL] = padded.reshape(rows, 1, per_row, 1)
    strip = cells.reshape(rows * _CELL_PITCH, per_row * _CELL_PITCH)

    row_labels = [str(r * per_row) for r in range(rows)]
    gutter = max(text_width(label, ROW_LABEL_SIZE) for label in row_labels) + 2 * GAP
    body_height = GAP + strip.shape[0] + GAP
    body_width = gutter + strip.shape[1] + GAP

    how = "symmetric about 0" if centred else "min-max"
    scope = "one range" if value_range is None else "shared range"
    range_text = f"range [{fmt_value(lo)}, {fmt_value(hi)}]"
    labels = (
        (fmt_value(lo), "0", "+" + fmt_value(hi)) if centred else (fmt_value(lo), fmt_value(hi))
    )
    count_text = f"{shown_count} of {total} value{'' if total == 1 else 's'}"
    header = Header(
        title=title,
        info=f"{count_text}  |  {scope}, {how}  |  {range_text}",
        labels=labels,
        nonfinite=shown_finite is not None,
        notes=tuple(notes),
    )
    canvas, header_height = new_canvas(body_height, body_width, header)
    top = header_height + GAP
    canvas[top : top + strip.shape[0], gutter : gutter + strip.shape[1]] = strip
    label_offset = (_CELL - line_height(ROW_LABEL_SIZE)) // 2
    for r, label in enumerate(row_labels):
        x = gutter - GAP - text_width(label, ROW_LABEL_SIZE)
        paste_text(canvas, label, ROW_LABEL_SIZE, x, max(0, top + r * _CELL_PITCH + label_offset))
    canvas.setflags(write=False)
    return GridImage(
        indices=canvas,
        palette=palette_for(cmap_name),
        channels_shown=shown_count,
        channels_total=total,
        channel_ids=tuple(range(shown_count)),
        vmin=float(lo),
        vmax=float(hi),
        cmap=cmap_name,
        signed=centred,
        norm="layer" if value_range is None else "shared",
        header_height=header_height,
        tile_shape=(_CELL, _CELL),
        grid_shape=(rows, per_row),
        upscale=1,
        pitch=(_CELL_PITCH, _CELL_PITCH),
    )
