"""Video feature maps ``(C, T, H, W)`` drawn so time is visible: one row per channel, one
column per frame, each channel on one scale over all its frames (a change over time is a
change of colour along the row, not lost to a per-frame rescale)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from actviz.render.grid import tiled_image
from actviz.render.legend import Header, new_canvas
from actviz.render.normalize import as_float32, check_clip, map_levels, range_is_signed
from actviz.render.palette import CENTER_LEVEL, GridImage, choose_cmap
from actviz.render.scales import (
    channel_ranges,
    channel_scale,
    choose_channels,
    layer_scale,
    prefix_band_levels,
)
from actviz.render.tiling import body_shape, tile_grid, tile_layout

__all__ = ["frame_columns", "render_time_strips"]


def frame_columns(frames: int, max_frames: int) -> list[int]:
    """The frames a strip shows: all of them, or ``max_frames`` spread evenly (first and
    last included)."""
    if max_frames <= 0 or frames <= max_frames:
        return list(range(frames))
    if max_frames == 1:
        return [0]
    return sorted({round(i * (frames - 1) / (max_frames - 1)) for i in range(max_frames)})


def render_time_strips(
    act: npt.ArrayLike,
    *,
    title: str,
    max_channels: int = 16,
    max_frames: int = 16,
    order: str = "index",
    norm: str = "channel",
    value_range: tuple[float, float] | None = None,
    clip: tuple[float, float] | None = None,
    cmap: str | None = None,
    min_tile: int = 24,
    notes: Sequence[str] = (),
    prefix: npt.ArrayLike | None = None,
    frame_names: Sequence[str] | None = None,
) -> GridImage:
    """Draw one clip's ``(C, T, H, W)`` maps as rows of channels and columns of frames.

    Args:
        act: ``(C, T, H, W)`` real array for one clip.
        title: First header line.
        max_channels: Rows: at most this many channels (0 or negative: all).
        max_frames: Columns: at most this many frames, spread evenly (0 or negative: all).
        order: ``index``, or by descending ``mean``, ``max`` or ``std`` over the whole clip.
        norm: ``channel``: each channel (row) one range over all its frames; ``layer``: one
            range for every row.
        value_range: A fixed ``(low, high)`` for every row.
        clip: Percentiles ``(low, high)``: each range is taken between them (heavy-tailed
            values such as gradients).
        cmap: Colormap name; None picks viridis, or RdBu_r centred on 0 for signed data.
        min_tile: Small maps are upscaled (nearest) until their longer side reaches this.
        notes: Further header lines.
        prefix: ``(C, P)`` values drawn apart from the frames (a video transformer's class
            token): P columns before the first frame, each tile one flat colour on its
            row's scale.
        frame_names: What each frame is called along the first row (``t0``, ``t1``, ...
            by default; ``frame 1``, ``frame 2`` for a pair of pictures).

    Returns:
        The picture; ``grid_shape`` is ``(channels shown, prefix columns + frames shown)``.

    Raises:
        ValueError: For an array that is not ``(C, T, H, W)`` or is empty.
    """
    array = as_float32(act, "act")
    if array.ndim != 4 or 0 in array.shape:
        raise ValueError(f"act must be a non-empty (C, T, H, W) array, got shape {array.shape}")
    total, frames, height, width = array.shape
    columns = frame_columns(frames, max_frames)
    shown_t = len(columns)
    # Ranges and scores over every frame; a row is one channel's frames side by side.
    flat = np.ascontiguousarray(array[:, columns]).reshape(total, shown_t * height, width)
    finite_all = np.isfinite(flat)
    finite = None if bool(finite_all.all()) else finite_all
    ranges = channel_ranges(flat, finite)
    chosen = choose_channels(flat, finite, ranges, max_channels, order, None)
    lo, hi = value_range if value_range is not None else (ranges.layer_lo, ranges.layer_hi)
    cmap_name, centred = choose_cmap(cmap, range_is_signed(lo, hi))
    percentiles = check_clip(clip) if clip is not None and value_range is None else None
    if value_range is not None or norm == "layer":
        scale = layer_scale(flat, finite, ranges, chosen.count, value_range, percentiles, centred)
    else:
        scale = channel_scale(ranges, chosen, percentiles, centred)
    neutral = CENTER_LEVEL if centred else 0
    levels = map_levels(
        chosen.maps, scale.row_lo, scale.row_hi, scale.constant, neutral, chosen.finite
    )
    tiles = levels.reshape(chosen.count, shown_t, height, width)
    heads: list[str] = []
    if prefix is not None:
        band = prefix_band_levels(prefix, total, chosen.ids, scale, neutral)  # (k, P)
        flat_tiles = np.broadcast_to(band[:, :, None, None], (*band.shape, height, width))
        tiles = np.concatenate([flat_tiles, tiles], axis=1)
        heads = ["cls" if band.shape[1] == 1 else f"p{i}" for i in range(band.shape[1])]
    per_row = tiles.shape[1]
    upscale = max(1, math.ceil(min_tile / max(height, width)))
    # The channel at the start of each row; what each column is along the first row.
    frame_label = list(frame_names) if frame_names is not None else []
    names = heads + [frame_label[t] if t < len(frame_label) else f"t{t}" for t in columns]
    labels = [
        (f"ch {int(chosen.ids[row])}, {names[0]}" if row == 0 else f"ch {int(chosen.ids[row])}")
        if col == 0
        else (names[col] if row == 0 else "")
        for row in range(chosen.count)
        for col in range(per_row)
    ]
    stacked = np.ascontiguousarray(tiles).reshape(chosen.count * per_row, height, width)
    placed = tile_layout(height * upscale, width * upscale, labels)
    body_h, body_w = body_shape(len(labels), per_row, placed)
    sampled = "" if shown_t == frames else f" (every {frames / shown_t:.3g}th)"
    count = f"{chosen.count} of {total} channels (rows)"
    if order != "index":
        count += f", sorted by {order}"
    header = Header(
        title=title,
        info=f"{count} x {shown_t} of {frames} frames (columns){sampled}  |  "
        f"{scale.description} over all frames  |  {scale.range_text}",
        labels=scale.labels,
        nonfinite=chosen.finite is not None,
        notes=tuple(notes),
    )
    canvas, header_h = new_canvas(body_h, body_w, header)
    tile_grid(stacked, per_row, upscale, labels, out=canvas[header_h:, :body_w])
    return tiled_image(
        canvas,
        header_height=header_h,
        chosen=chosen,
        total=total,
        scale=scale,
        cmap_name=cmap_name,
        centred=centred,
        tile_shape=(height * upscale, width * upscale),
        grid_shape=(chosen.count, per_row),
        upscale=upscale,
        placed=placed,
    )
