"""The header band at the top of every picture: title, description, colour bar and labels.

Text is drawn with Pillow's default font as crisp glyph masks pasted into the palette-index
canvas in ``TEXT``; fonts and glyph masks are cached, so a header costs little after the
first picture. The colour bar shows the palette's levels from low to high, labelled with the
range it stands for, and a ``NONFINITE`` swatch when the picture has NaN or infinite values.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from actviz.render.normalize import BoolArray
from actviz.render.palette import BACKGROUND, N_LEVELS, NONFINITE, TEXT, U8Array

__all__ = [
    "HEADER_MIN_WIDTH",
    "Header",
    "fmt_value",
    "line_height",
    "new_canvas",
    "paste_text",
    "text_width",
]

HEADER_MIN_WIDTH = 420
"""The picture is never narrower than this, so the header always fits."""

# Header layout (pixels).
_PAD_X = 6
_PAD_Y = 5
_TITLE_SIZE = 13
_INFO_SIZE = 12
_LABEL_SIZE = 11
_BAR_WIDTH = 160
_BAR_HEIGHT = 8


# --------------------------------------------------------------------------- text


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=8)
def line_height(size: int) -> int:
    """Height in pixels of one line of text at font ``size``."""
    font = _font(size)
    if isinstance(font, ImageFont.FreeTypeFont):
        ascent, descent = font.getmetrics()
        return int(ascent + descent)
    return int(font.getbbox("Hg")[3]) + 1


@functools.lru_cache(maxsize=2048)
def _text_mask(text: str, size: int) -> BoolArray:
    """Boolean glyph mask of one line of text, ``line_height(size)`` pixels tall."""
    font = _font(size)
    width = max(1, math.ceil(font.getbbox(text, mode="1")[2]) + 2)
    image = Image.new("L", (width, line_height(size)), 0)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "1"  # crisp, hinted glyphs: no anti-aliasing to threshold away
    draw.text((0, 0), text, font=font, fill=255)
    mask = np.asarray(image) > 127
    mask.setflags(write=False)
    return mask


def text_width(text: str, size: int) -> int:
    """Width in pixels of ``text`` drawn at font ``size``."""
    return int(_text_mask(text, size).shape[1])


def paste_text(canvas: U8Array, text: str, size: int, x: int, y: int) -> None:
    """Draw ``text`` in ``TEXT`` with its top-left corner at ``(x, y)``, cut at the edges."""
    if not text:
        return
    mask = _text_mask(text, size)
    height = min(mask.shape[0], canvas.shape[0] - y)
    width = min(mask.shape[1], canvas.shape[1] - x)
    if height <= 0 or width <= 0:
        return
    region = canvas[y : y + height, x : x + width]
    region[mask[:height, :width]] = TEXT


def fmt_value(value: float) -> str:
    """A value as the header shows it: three significant digits, and ``0`` for zero."""
    if value == 0:
        return "0"
    return f"{value:.3g}"


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class Header:
    """What a header says: two lines of text and the colour bar's labels."""

    title: str
    info: str
    labels: tuple[str, ...]  # two (low, high) or three (low, centre, high)
    nonfinite: bool


@functools.lru_cache(maxsize=1)
def _header_rows() -> tuple[int, int, int, int, int]:
    """``(title_y, info_y, bar_y, label_y, height)`` of the header band."""
    title_y = _PAD_Y
    info_y = title_y + line_height(_TITLE_SIZE) + 2
    bar_y = info_y + line_height(_INFO_SIZE) + 4
    label_y = bar_y + _BAR_HEIGHT + 1
    height = label_y + line_height(_LABEL_SIZE) + 3
    return title_y, info_y, bar_y, label_y, height


_NONFINITE_LEGEND = "NaN/Inf"


def _header_width(header: Header) -> int:
    widths = [
        text_width(header.title, _TITLE_SIZE),
        text_width(header.info, _INFO_SIZE),
        _BAR_WIDTH + 20 + _BAR_HEIGHT + 4 + text_width(_NONFINITE_LEGEND, _LABEL_SIZE),
    ]
    return max(widths) + 2 * _PAD_X


def _colour_bar() -> U8Array:
    levels = np.rint(np.linspace(0, N_LEVELS - 1, _BAR_WIDTH)).astype(np.uint8)
    return np.broadcast_to(levels, (_BAR_HEIGHT, _BAR_WIDTH))


def _draw_header(canvas: U8Array, header: Header) -> None:
    title_y, info_y, bar_y, label_y, _ = _header_rows()
    paste_text(canvas, header.title, _TITLE_SIZE, _PAD_X, title_y)
    paste_text(canvas, header.info, _INFO_SIZE, _PAD_X, info_y)

    bar_x = _PAD_X
    canvas[bar_y : bar_y + _BAR_HEIGHT, bar_x : bar_x + _BAR_WIDTH] = _colour_bar()
    low, *middle, high = header.labels
    paste_text(canvas, low, _LABEL_SIZE, bar_x, label_y)
    high_x = max(bar_x, bar_x + _BAR_WIDTH - text_width(high, _LABEL_SIZE) + 2)
    paste_text(canvas, high, _LABEL_SIZE, high_x, label_y)
    for centre in middle:
        centre_x = bar_x + _BAR_WIDTH // 2 - text_width(centre, _LABEL_SIZE) // 2 + 1
        paste_text(canvas, centre, _LABEL_SIZE, centre_x, label_y)

    if header.nonfinite:
        swatch_x = bar_x + _BAR_WIDTH + 20
        canvas[bar_y : bar_y + _BAR_HEIGHT, swatch_x : swatch_x + _BAR_HEIGHT] = NONFINITE
        legend_y = bar_y + _BAR_HEIGHT // 2 - line_height(_LABEL_SIZE) // 2
        paste_text(canvas, _NONFINITE_LEGEND, _LABEL_SIZE, swatch_x + _BAR_HEIGHT + 4, legend_y)


def new_canvas(body_height: int, body_width: int, header: Header) -> tuple[U8Array, int]:
    """A BACKGROUND canvas with the header drawn; returns it and the header height."""
    header_height = _header_rows()[4]
    width = max(body_width, HEADER_MIN_WIDTH, _header_width(header))
    canvas = np.full((header_height + body_height, width), BACKGROUND, dtype=np.uint8)
    _draw_header(canvas, header)
    return canvas, header_height
