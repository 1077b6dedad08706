"""Pictures of dataset examples: crops with heat maps, contact sheets, overviews. Pure arrays.

A *tile* is the part of the model input (as the model saw it: resized, centre-cropped,
de-normalized) inside the receptive field of the channel's maximum, scaled to fit a square,
with the channel's map blended over it: colours from a matplotlib colormap table, opacity
growing with the activation, so where the channel does not fire the photo shows through. The
argmax cell is outlined when it is smaller than the crop. A *contact sheet* is one channel's
tiles, best first, each labelled with its rank, score and file; an *overview* is one row of
tiles per channel. Both have the header of every actviz picture (``render.legend``).

Built with numpy and Pillow, one array per picture; nothing is written here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.examples.plan import LayerPlan
from actviz.examples.topk import LayerTop
from actviz.render.legend import Header, fmt_value, line_height, new_canvas, paste_text, text_width
from actviz.render.palette import BACKGROUND, colormap_lut, palette_for

__all__ = [
    "GAP",
    "LABEL_SIZE",
    "Row",
    "SheetTile",
    "contact_sheet",
    "crop_view",
    "cut_tile",
    "heat_scales",
    "overview",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]

GAP = 4
"""Pixels between tiles and around them."""
LABEL_SIZE = 11
"""Font size of the text under tiles and beside rows."""
ALPHA = 0.6
"""Opacity of the heat colour where the map reaches the channel's scale."""
_OUTLINE = np.array([255, 255, 255], dtype=np.float32)
_ROW_LABEL_WIDTH = 76


def heat_scales(top: LayerTop) -> F32:
    """Per channel, the value the heat maps of its tiles are scaled by: the highest value in
    its entries' windows (0 when nothing is above zero, so nothing is coloured)."""
    heat = np.where(top.valid[:, :, None, None], top.heat, -np.inf)
    heat = np.where(np.isfinite(heat), heat, -np.inf)
    flat = heat.reshape(heat.shape[0], -1)
    scale = flat.max(axis=1) if flat.shape[1] else np.zeros(heat.shape[0])
    return np.where(np.isfinite(scale) & (scale > 0), scale, 0).astype(np.float32)


def crop_view(view: Image.Image, box: tuple[int, int, int, int], tile: int) -> F32:
    """The part of ``view`` inside ``box`` = ``(top, bottom, left, right)``, scaled to fit a
    ``tile`` square (small fields enlarged with crisp pixels, large ones smoothly reduced)."""
    top, bottom, left, right = box
    box_h, box_w = bottom - top, right - left
    factor = tile / max(box_h, box_w)
    th, tw = max(1, round(box_h * factor)), max(1, round(box_w * factor))
    resample = Image.Resampling.NEAREST if factor >= 3 else Image.Resampling.BILINEAR
    crop: F32 = np.asarray(
        view.resize((tw, th), resample, box=(left, top, right, bottom)), dtype=np.float32
    )
    return crop


def cut_tile(
    view: Image.Image | F32,
    plan: LayerPlan,
    y: int,
    x: int,
    window: F32,
    origin: tuple[int, int],
    scale: float,
    *,
    tile: int,
    cmap: str,
) -> U8:
    """One crop with its heat map, ``(tile, tile, 3)`` uint8, letterboxed on the background.

    Args:
        view: The model input as the model saw it (RGB, the model's input size), or its crop
            for this cell's field already scaled by :func:`crop_view` (several channels with
            their maximum in the same cell share it).
        plan: The layer's plan (receptive field, map grid).
        y: Row of the channel's maximum in the map grid.
        x: Column of it.
        window: ``(wh, ww)`` the map around the maximum, from the top-left cell ``origin``.
        origin: ``(row, column)`` of the window's top-left cell.
        scale: The value that gets the full colour (0: no colour).
        tile: Side of the tile in pixels.
        cmap: The heat map's colormap.
    """
    box = plan.receptive.box(y, x)
    top, bottom, left, right = box
    box_h, box_w = bottom - top, right - left
    crop = view if isinstance(view, np.ndarray) else crop_view(view, box, tile)
    th, tw = crop.shape[:2]
    sy, sx = plan.receptive.stride
    # The map value under the centre of each tile pixel, bilinear between cell centres.
    rows = (top + (np.arange(th) + 0.5) * box_h / th) / sy - 0.5 - origin[0]
    cols = (left + (np.arange(tw) + 0.5) * box_w / tw) / sx - 0.5 - origin[1]
    if scale > 0:
        level = np.clip(_bilinear(window, rows, cols) * np.float32(1 / scale), 0.0, 1.0)
        level = np.nan_to_num(level, nan=0.0)
    else:
        level = np.zeros((th, tw), np.float32)
    colour = _lut(cmap)[np.rint(level * 255).astype(np.intp)]
    alpha = (np.float32(ALPHA) * level)[..., None]
    mixed = crop + alpha * (colour - crop)
    # The argmax cell, outlined when it is a clear part of the crop.
    cell_top, cell_left = (y * sy - top) * th / box_h, (x * sx - left) * tw / box_w
    cell_h, cell_w = sy * th / box_h, sx * tw / box_w
    if min(cell_h, cell_w) >= 4 and max(cell_h / th, cell_w / tw) < 0.75:
        _outline(mixed, cell_top, cell_left, cell_h, cell_w)
    out = np.empty((tile, tile, 3), dtype=np.uint8)
    out[...] = _background(cmap)
    oy, ox = (tile - th) // 2, (tile - tw) // 2
    out[oy : oy + th, ox : ox + tw] = np.clip(mixed + 0.5, 0, 255).astype(np.uint8)
    return out


@functools.lru_cache(maxsize=16)
def _lut(cmap: str) -> F32:
    table: F32 = colormap_lut(cmap, 256).astype(np.float32)
    table.setflags(write=False)
    return table


@functools.lru_cache(maxsize=16)
def _background(cmap: str) -> U8:
    colour: U8 = palette_for(cmap)[BACKGROUND]
    return colour


def _bilinear(window: F32, rows: npt.NDArray[np.float64], cols: npt.NDArray[np.float64]) -> F32:
    """``window`` sampled at fractional cell coordinates ``rows x cols``, edges clamped."""
    wh, ww = window.shape
    r = np.clip(rows, 0, wh - 1)
    c = np.clip(cols, 0, ww - 1)
    r0, c0 = np.floor(r).astype(np.intp), np.floor(c).astype(np.intp)
    r1, c1 = np.minimum(r0 + 1, wh - 1), np.minimum(c0 + 1, ww - 1)
    fr = (r - r0).astype(np.float32)[:, None]
    fc = (c - c0).astype(np.float32)[None, :]
    values = np.asarray(window, dtype=np.float32)
    upper, lower = values[r0], values[r1]
    top = upper[:, c0] + fc * (upper[:, c1] - upper[:, c0])
    bottom = lower[:, c0] + fc * (lower[:, c1] - lower[:, c0])
    out: F32 = top + fr * (bottom - top)
    return out


def _outline(pixels: npt.NDArray[np.float32], top: float, left: float, h: float, w: float) -> None:
    height, width = pixels.shape[:2]
    y0, x0 = max(0, math.floor(top)), max(0, math.floor(left))
    y1, x1 = min(height - 1, math.ceil(top + h) - 1), min(width - 1, math.ceil(left + w) - 1)
    if y1 <= y0 or x1 <= x0:
        return
    for rows, cols in (
        (slice(y0, y0 + 1), slice(x0, x1 + 1)),
        (slice(y1, y1 + 1), slice(x0, x1 + 1)),
        (slice(y0, y1 + 1), slice(x0, x0 + 1)),
        (slice(y0, y1 + 1), slice(x1, x1 + 1)),
    ):
        pixels[rows, cols] = 0.3 * pixels[rows, cols] + 0.7 * _OUTLINE


@dataclass(frozen=True)
class SheetTile:
    """One tile of a contact sheet and the two lines under it."""

    pixels: U8
    score: str
    name: str


def _fit(text: str, width: int) -> str:
    """``text`` cut from the left with an ellipsis until it fits ``width`` pixels (the end of
    a file name says more than its start)."""
    if text_width(text, LABEL_SIZE) <= width:
        return text
    while len(text) > 1 and text_width("…" + text, LABEL_SIZE) > width:
        text = text[1:]
    return "…" + text


def _to_rgb(canvas: U8, cmap: str) -> U8:
    """Palette indices to RGB through Pillow (several times faster than numpy indexing)."""
    height, width = canvas.shape
    image = Image.frombytes("P", (width, height), np.ascontiguousarray(canvas).tobytes())
    image.putpalette(palette_for(cmap).tobytes(), rawmode="RGB")
    rgb: U8 = np.array(image.convert("RGB"))
    return rgb


def contact_sheet(
    tiles: Sequence[SheetTile], header: Header, *, tile: int, cmap: str, columns: int = 10
) -> U8:
    """One channel's tiles, best first, under the header; ``(H, W, 3)`` uint8."""
    count = max(1, len(tiles))
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    line = line_height(LABEL_SIZE)
    strip = 2 * line + 4
    pitch_h, pitch_w = tile + strip + GAP, tile + GAP
    body_h, body_w = GAP + rows * pitch_h, GAP + columns * pitch_w
    canvas, head = new_canvas(body_h, body_w, header)
    spots = []
    for i, item in enumerate(tiles):
        row, column = divmod(i, columns)
        top, left = head + GAP + row * pitch_h, GAP + column * pitch_w
        paste_text(canvas, _fit(item.score, tile), LABEL_SIZE, left, top + tile + 2)
        paste_text(canvas, _fit(item.name, tile), LABEL_SIZE, left, top + tile + 2 + line)
        spots.append((top, left))
    rgb = _to_rgb(canvas, cmap)
    for (top, left), item in zip(spots, tiles, strict=True):
        rgb[top : top + tile, left : left + tile] = item.pixels
    return rgb


@dataclass(frozen=True)
class Row:
    """One channel's row of an overview: its label lines and tiles."""

    labels: tuple[str, ...]
    tiles: Sequence[U8]


def overview(rows: Sequence[Row], header: Header, *, tile: int, cmap: str, k: int) -> U8:
    """One row of tiles per channel under the header; ``(H, W, 3)`` uint8."""
    count = max(1, len(rows))
    pitch = tile + GAP
    body_h = GAP + count * pitch
    body_w = GAP + _ROW_LABEL_WIDTH + max(1, k) * pitch
    canvas, head = new_canvas(body_h, body_w, header)
    line = line_height(LABEL_SIZE)
    for i, row in enumerate(rows):
        top = head + GAP + i * pitch
        for j, text in enumerate(row.labels):
            paste_text(canvas, _fit(text, _ROW_LABEL_WIDTH - GAP), LABEL_SIZE, GAP, top + j * line)
    rgb = _to_rgb(canvas, cmap)
    for i, row in enumerate(rows):
        top = head + GAP + i * pitch
        for j, pixels in enumerate(row.tiles):
            left = GAP + _ROW_LABEL_WIDTH + j * pitch
            rgb[top : top + tile, left : left + tile] = pixels
    return rgb


def score_text(value: float) -> str:
    """A score as the pictures show it."""
    if not math.isfinite(value):
        return str(value)
    return fmt_value(value)
