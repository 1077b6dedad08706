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
from pathlib import PurePath

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render import (
    BACKGROUND,
    HEADER_MIN_WIDTH,
    Header,
    colormap_lut,
    fmt_value,
    header_height,
    line_height,
    new_canvas,
    palette_for,
    paste_text,
    text_width,
)
from actviz.render.theme import CAPTION_SIZE, PAD, PANEL_GAP, PANEL_LABEL_SIZE
from actviz.top_images.plan import LayerPlan
from actviz.top_images.topk import LayerTop

__all__ = [
    "GAP",
    "LABEL_SIZE",
    "Row",
    "SheetTile",
    "contact_sheet",
    "crop_view",
    "cut_tiles",
    "heat_scales",
    "max_overview_rows",
    "overview",
    "score_text",
    "tile_name",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]

GAP = PANEL_GAP
"""Pixels between tiles and around them."""
LABEL_SIZE = PANEL_LABEL_SIZE
"""Font size of the text under tiles and beside rows."""
ALPHA = 0.6
"""Opacity of the heat colour where the map reaches the channel's scale."""
_ROW_LABEL_WIDTH = 76


def heat_scales(top: LayerTop) -> F32:
    """Per channel, the value the heat maps of its tiles are scaled by: the highest value in
    its entries' windows (0 when nothing is above zero, so nothing is coloured)."""
    heat = np.where(top.valid[:, :, None, None], top.heat, -np.inf)
    heat = np.where(np.isfinite(heat), heat, -np.inf)
    flat = heat.reshape(heat.shape[0], -1)
    scale = flat.max(axis=1) if flat.shape[1] else np.zeros(heat.shape[0])
    return np.where(np.isfinite(scale) & (scale > 0), scale, 0).astype(np.float32)


def crop_view(view: Image.Image, box: tuple[int, int, int, int], tile: int) -> U8:
    """The part of ``view`` inside ``box`` = ``(top, bottom, left, right)``, scaled to fit a
    ``tile`` square (small fields enlarged with crisp pixels, large ones smoothly reduced)."""
    top, bottom, left, right = box
    box_h, box_w = bottom - top, right - left
    factor = tile / max(box_h, box_w)
    th, tw = max(1, round(box_h * factor)), max(1, round(box_w * factor))
    resample = Image.Resampling.NEAREST if factor >= 3 else Image.Resampling.BILINEAR
    crop: U8 = np.asarray(
        view.resize((tw, th), resample, box=(left, top, right, bottom)), dtype=np.uint8
    )
    return crop


def cut_tiles(
    crop: U8,
    plan: LayerPlan,
    box: tuple[int, int, int, int],
    origin: tuple[int, int],
    cells: Sequence[tuple[int, int]],
    windows: F32,
    scales: F32,
    *,
    tile: int,
    cmap: str,
) -> U8:
    """Tiles of several entries that share a field and a heat-map window origin (channels
    peaking in the same place of one image): ``(n, tile, tile, 3)`` uint8, letterboxed.

    Args:
        crop: The view inside ``box`` scaled by :func:`crop_view`, ``(th, tw, 3)``.
        plan: The layer's plan (receptive field, map grid).
        box: ``(top, bottom, left, right)`` of the field in the model input.
        origin: ``(row, column)`` of the windows' top-left cell.
        cells: Each entry's maximum ``(row, column)`` in the map grid.
        windows: ``(n, wh, ww)`` each entry's map around its maximum.
        scales: ``(n,)`` the value that gets the full colour (0: no colour).
        tile: Side of the tiles in pixels.
        cmap: The heat maps' colormap.
    """
    top, bottom, left, right = box
    box_h, box_w = bottom - top, right - left
    th, tw = crop.shape[:2]
    sy, sx = plan.receptive.stride
    count = windows.shape[0]
    # The map under the centre of each tile pixel, bilinear between cell centres, for every
    # entry at once: rows @ window @ columns.T.
    rows = _weights(
        (top + (np.arange(th) + 0.5) * box_h / th) / sy - 0.5 - origin[0], windows.shape[1]
    )
    cols = _weights(
        (left + (np.arange(tw) + 0.5) * box_w / tw) / sx - 0.5 - origin[1], windows.shape[2]
    )
    heat = rows @ np.nan_to_num(windows.astype(np.float32), nan=0.0) @ cols.T
    inverse = np.where(scales > 0, 1 / np.where(scales > 0, scales, 1), 0).astype(np.float32)
    heat *= inverse[:, None, None] * 255
    np.clip(heat, 0, 255, out=heat)
    heat += 0.5
    level = heat.astype(np.uint8)
    # Integer blending through two tables of the level: the photo's weight, and the heat
    # colour already multiplied by its own (ALPHA * level / 255, in 1/256 steps). np.take is
    # several times faster than fancy indexing here.
    keep, tint = _blend_tables(cmap)
    mixed = crop.astype(np.uint16)[None] * np.take(keep, level, axis=0)
    mixed += np.take(tint, level, axis=0)
    mixed >>= 8
    pixels = mixed.astype(np.uint8)
    cell_h, cell_w = sy * th / box_h, sx * tw / box_w
    if min(cell_h, cell_w) >= 4 and max(cell_h / th, cell_w / tw) < 0.75:
        # The argmax cell, outlined when it is a clear part of the crop.
        for i, (y, x) in enumerate(cells):
            cell_top, cell_left = (y * sy - top) * th / box_h, (x * sx - left) * tw / box_w
            _outline(pixels[i], cell_top, cell_left, cell_h, cell_w)
    if (th, tw) == (tile, tile):
        return pixels
    out = np.empty((count, tile, tile, 3), dtype=np.uint8)
    out[...] = _background(cmap)
    oy, ox = (tile - th) // 2, (tile - tw) // 2
    out[:, oy : oy + th, ox : ox + tw] = pixels
    return out


def _weights(positions: npt.NDArray[np.float64], cells: int) -> F32:
    """``(len(positions), cells)`` bilinear weights of fractional cell positions, edges
    clamped: one row per output pixel, summing to 1."""
    u = np.clip(positions, 0, cells - 1)
    first = np.floor(u).astype(np.intp)
    second = np.minimum(first + 1, cells - 1)
    frac = (u - first).astype(np.float32)
    weights = np.zeros((len(u), cells), np.float32)
    rows = np.arange(len(u))
    np.add.at(weights, (rows, first), 1 - frac)
    np.add.at(weights, (rows, second), frac)
    return weights


@functools.lru_cache(maxsize=16)
def _blend_tables(cmap: str) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16]]:
    """Per level 0-255: the photo's weight ``(256, 1)`` and the heat colour times its weight
    plus rounding ``(256, 3)``, both in 1/256 steps, as uint16."""
    weight = np.rint(ALPHA * np.arange(256) / 255 * 256).astype(np.uint16)[:, None]
    colour = colormap_lut(cmap, 256).astype(np.uint16)
    keep = (256 - weight).astype(np.uint16)
    tint = (colour * weight + 128).astype(np.uint16)
    keep.setflags(write=False)
    tint.setflags(write=False)
    return keep, tint


@functools.lru_cache(maxsize=16)
def _background(cmap: str) -> U8:
    colour: U8 = palette_for(cmap)[BACKGROUND]
    return colour


def _outline(pixels: U8, top: float, left: float, h: float, w: float) -> None:
    """A light frame, 70 % white, around ``(top, left, h, w)`` of one tile."""
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
        pixels[rows, cols] = pixels[rows, cols] * 3 // 10 + 179


@dataclass(frozen=True)
class SheetTile:
    """One tile of a contact sheet and the two lines under it."""

    pixels: U8
    score: str
    name: str


def tile_name(path: str) -> str:
    """What a tile is labelled with: the file's name and its folder's (``s1/cat.jpg``), so
    identical names in different folders can be told apart."""

    pure = PurePath(path)
    return f"{pure.parent.name}/{pure.name}" if pure.parent.name else pure.name


def _fit(text: str, width: int) -> str:
    """``text`` cut in the middle with an ellipsis until it fits ``width`` pixels: the folder
    and the start of a file name on the left, its end and extension on the right."""
    if text_width(text, LABEL_SIZE) <= width:
        return text
    middle = len(text) // 2
    head, tail = text[:middle], text[middle:]
    while head + tail and text_width(f"{head}…{tail}", LABEL_SIZE) > width:
        if len(head) >= len(tail):
            head = head[:-1]
        else:
            tail = tail[1:]
    return f"{head}…{tail}"


@functools.lru_cache(maxsize=256)
def _advance(char: str, size: int) -> int:
    """How far the pen moves after ``char``."""
    return text_width(f"x{char}x", size) - text_width("xx", size)


def _paste_chars(canvas: U8, text: str, size: int, x: int, y: int) -> None:
    """Draw ``text`` one cached glyph at a time: scores and a channel's facts are new strings
    on every sheet, and a glyph costs nothing once drawn, where a new string is drawn whole
    (kerning is lost, which small labels do not miss)."""
    for char in text:
        if not char.isspace():
            paste_text(canvas, char, size, x, y)
        x += _advance(char, size)


@functools.lru_cache(maxsize=16)
def _header_band(header: Header, width: int) -> tuple[U8, int]:
    """The header drawn once per layer, copied onto each of its sheets."""
    band, height = new_canvas(0, width, header)
    band.setflags(write=False)
    return band, height


def _chars_width(text: str, size: int) -> int:
    """The width of ``text`` drawn by :func:`_paste_chars`."""
    return sum(_advance(char, size) for char in text)


def _flow(phrases: Sequence[str], size: int, width: int) -> list[tuple[str, int, int]]:
    """Place phrases left to right, a wide space apart, on as many lines as ``width`` needs:
    ``(phrase, x, line)``."""
    placed = []
    x, line, space = 0, 0, _advance(" ", size) * 3
    for phrase in phrases:
        wide = _chars_width(phrase, size)
        if x and x + wide > width:
            x, line = 0, line + 1
        placed.append((phrase, x, line))
        x += wide + space
    return placed


def _to_rgb(canvas: U8, cmap: str) -> U8:
    """Palette indices to RGB through Pillow (several times faster than numpy indexing)."""
    height, width = canvas.shape
    image = Image.frombytes("P", (width, height), np.ascontiguousarray(canvas).tobytes())
    image.putpalette(palette_for(cmap).tobytes(), rawmode="RGB")
    rgb: U8 = np.array(image.convert("RGB"))
    return rgb


def contact_sheet(
    tiles: Sequence[SheetTile],
    header: Header,
    *,
    subtitle: Sequence[str] = (),
    tile: int,
    cmap: str,
    columns: int = 10,
) -> U8:
    """One channel's tiles, best first, each over its score and file name, under the header
    and the facts about the channel (``subtitle``: short phrases, flowed into as many lines
    as the width needs); ``(H, W, 3)`` uint8.

    The header is the layer's (drawn once, then copied), so the channel is named in the
    subtitle.
    """
    count = max(1, len(tiles))
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    line = line_height(LABEL_SIZE)
    strip = 2 * line + 4
    pitch_h, pitch_w = tile + strip + GAP, tile + GAP
    body_width = GAP + columns * pitch_w
    band, head = _header_band(header, body_width)
    width = band.shape[1]
    placed = _flow(subtitle, CAPTION_SIZE, width - 2 * PAD)
    sub_line = line_height(CAPTION_SIZE)
    sub = (max(y for _, _, y in placed) + 1) * sub_line + 4 if placed else 0
    canvas = np.full((head + sub + GAP + rows * pitch_h, width), BACKGROUND, dtype=np.uint8)
    canvas[:head] = band
    for phrase, x, y in placed:
        _paste_chars(canvas, phrase, CAPTION_SIZE, PAD + x, head + 2 + y * sub_line)
    spots = []
    for i, item in enumerate(tiles):
        row, column = divmod(i, columns)
        top, left = head + sub + GAP + row * pitch_h, GAP + column * pitch_w
        _paste_chars(canvas, item.score, LABEL_SIZE, left, top + tile + 2)
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


def max_overview_rows(header: Header, *, tile: int, k: int) -> int:
    """The most channel rows an overview under ``header`` may have and stay within what
    Pillow opens by default (``Image.MAX_IMAGE_PIXELS``): actviz never writes a picture its
    own reader, or an image viewer built on Pillow, would refuse as a decompression bomb."""

    limit = int(Image.MAX_IMAGE_PIXELS or 89_478_485)
    width = max(GAP + _ROW_LABEL_WIDTH + max(1, k) * (tile + GAP), HEADER_MIN_WIDTH)
    body = limit // width - header_height(header, width) - GAP
    return max(1, body // (tile + GAP))


def score_text(value: float) -> str:
    """A score as the pictures show it."""
    if not math.isfinite(value):
        return str(value)
    return fmt_value(value)
