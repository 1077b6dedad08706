"""The header band at the top of every picture: title, description, notes, colour bar, labels.

Text is drawn as crisp glyph masks pasted into the palette-index canvas in ``TEXT``, in DejaVu
Sans (shipped with matplotlib; Pillow's scalable default font when it cannot be found), at
sizes where every digit is told apart at 1:1. The header is as wide as the picture below it
(never narrower than ``HEADER_MIN_WIDTH``) and long text wraps to that width instead of
widening the picture. Fonts and glyph masks are cached, so a header costs little after the
first picture. The colour bar shows the palette's levels from low to high, labelled with the
range it stands for, and a ``NONFINITE`` swatch when the picture has NaN or infinite values.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from actviz.render.normalize import BoolArray
from actviz.render.palette import BACKGROUND, N_LEVELS, NONFINITE, TEXT, U8Array
from actviz.render.theme import INFO_SIZE, LABEL_SIZE, PAD, PAD_TOP, TITLE_SIZE

__all__ = [
    "HEADER_MIN_WIDTH",
    "Header",
    "bar_box",
    "digit_rows",
    "fmt_value",
    "font",
    "header_height",
    "line_height",
    "new_canvas",
    "paste_text",
    "text_width",
    "wrap_text",
]

HEADER_MIN_WIDTH = 420
"""The picture is never narrower than this, so the colour bar and short lines fit."""

# Header layout (pixels).
_LINE_GAP = 1
_BAR_WIDTH = 160
_BAR_HEIGHT = 8


# --------------------------------------------------------------------------- text


@functools.lru_cache(maxsize=1)
def _font_path() -> str | None:
    """DejaVu Sans from matplotlib's data: hinted for small sizes, and always installed.
    Found where the package lies, without importing it (about 0.1 s of start-up)."""

    spec = importlib.util.find_spec("matplotlib")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    for place in places:
        path = os.path.join(place, "mpl-data", "fonts", "ttf", "DejaVuSans.ttf")
        if os.path.isfile(path):
            return path
    import matplotlib  # an unusual layout: ask matplotlib itself

    path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
    return path if os.path.isfile(path) else None


@functools.lru_cache(maxsize=8)
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """The font every picture's text is drawn in, at ``size`` pixels."""
    path = _font_path()
    if path is not None:
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            pass
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=8)
def line_height(size: int) -> int:
    """Height in pixels of one line of text at font ``size``."""
    face = font(size)
    if isinstance(face, ImageFont.FreeTypeFont):
        ascent, descent = face.getmetrics()
        return int(ascent + descent)
    return int(face.getbbox("Hg")[3]) + 1


@functools.lru_cache(maxsize=4096)
def _text_mask(text: str, size: int) -> BoolArray:
    """Boolean glyph mask of one line of text, ``line_height(size)`` pixels tall."""
    face = font(size)
    image = Image.new("L", (text_width(text, size), line_height(size)), 0)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "1"  # crisp, hinted glyphs: no anti-aliasing to threshold away
    draw.text((0, 0), text, font=face, fill=255)
    mask = np.asarray(image) > 127
    mask.setflags(write=False)
    return mask


@functools.lru_cache(maxsize=4096)
def text_width(text: str, size: int) -> int:
    """Width in pixels of ``text`` drawn at font ``size`` (its mask's width).

    From the glyphs' bounding box, without drawing them: wrapping measures many candidate
    lines, and measuring is about five times cheaper than rasterizing.
    """
    return max(1, math.ceil(font(size).getbbox(text, mode="1")[2]) + 2)


def paste_text(
    canvas: U8Array, text: str, size: int, x: int, y: int, colour: int = TEXT, skip: int = 0
) -> None:
    """Draw ``text`` in ``colour`` with its top-left corner at ``(x, y)``, cut at the edges;
    ``skip`` leaves out that many rows at the top of the line (blank above digits)."""
    if not text:
        return
    mask = _text_mask(text, size)[skip:]
    height = min(mask.shape[0], canvas.shape[0] - y)
    width = min(mask.shape[1], canvas.shape[1] - x)
    if height <= 0 or width <= 0:
        return
    region = canvas[y : y + height, x : x + width]
    region[mask[:height, :width]] = colour


_SEPARATORS = re.compile(r"(  \|  |   )")


@functools.lru_cache(maxsize=1024)
def wrap_text(text: str, size: int, width: int) -> tuple[str, ...]:
    """Break ``text`` into lines no wider than ``width`` pixels at font ``size``.

    Parts separated by ``"  |  "`` or three spaces (the header's separators) are kept whole
    on a line when they fit; otherwise lines break at spaces, and a word wider than a whole
    line is cut between characters.
    """
    pieces = _SEPARATORS.split(text)
    lines: list[str] = []
    for i in range(0, len(pieces), 2):
        part = pieces[i]
        joined = f"{lines[-1]}{pieces[i - 1]}{part}" if lines else part
        if lines and text_width(joined, size) <= width:
            lines[-1] = joined
        else:
            lines.extend(_wrap_words(part, size, width))
    return tuple(lines) if lines else ("",)


def _wrap_words(text: str, size: int, width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for word, space in re.findall(r"(\S+)(\s*)", text.strip()):
        candidate = f"{line}{word}"
        if not line or text_width(candidate, size) <= width:
            line = candidate
        else:
            lines.append(line.rstrip())
            line = word
        while text_width(line, size) > width and len(line) > 1:
            cut = _longest_prefix(line, size, width)
            lines.append(line[:cut])
            line = line[cut:]
        line += space
    lines.append(line.rstrip())
    return lines


def _longest_prefix(text: str, size: int, width: int) -> int:
    """The most leading characters of ``text`` that fit in ``width`` (at least one)."""
    low, high = 1, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if text_width(text[:middle], size) <= width:
            low = middle
        else:
            high = middle - 1
    return low


@functools.lru_cache(maxsize=8)
def digit_rows(size: int) -> tuple[int, int]:
    """The first and last rows of a line at font ``size`` that digits draw in."""
    ink = np.zeros(line_height(size), dtype=bool)
    for digit in "0123456789":
        ink |= _text_mask(digit, size).any(axis=1)
    rows = np.nonzero(ink)[0]
    return (int(rows[0]), int(rows[-1])) if rows.size else (0, line_height(size) - 1)


def fmt_value(value: float) -> str:
    """A value as the header shows it: three significant digits, and ``0`` for zero."""
    if value == 0:
        return "0"
    return f"{value:.3g}"


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class Header:
    """What a header says: a title, a description, notes, and the colour bar's labels.

    Attributes:
        title: The first line, larger: what the picture is (layer, type, shape).
        info: What is shown and how it is scaled.
        labels: Two (low, high) or three (low, centre, high) colour-bar labels.
        nonfinite: Show the NaN/Inf swatch beside the colour bar.
        notes: Further lines: how the output was laid out, random weights, all-zero maps.
    """

    title: str
    info: str
    labels: tuple[str, ...]
    nonfinite: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Layout:
    lines: tuple[tuple[str, int, int], ...]  # (text, size, y)
    bar_y: int
    label_y: int
    height: int


_NONFINITE_LEGEND = "NaN/Inf"


@functools.lru_cache(maxsize=256)
def _layout(header: Header, width: int) -> _Layout:
    """Where each wrapped line, the colour bar and its labels go in a header ``width`` wide."""
    text_room = max(1, width - 2 * PAD)
    lines: list[tuple[str, int, int]] = []
    y = PAD_TOP
    blocks = [(header.title, TITLE_SIZE), (header.info, INFO_SIZE)]
    blocks += [(note, INFO_SIZE) for note in header.notes if note]
    for text, size in blocks:
        for line in wrap_text(text, size, text_room):
            lines.append((line, size, y))
            y += line_height(size) + _LINE_GAP
    bar_y = y + 3
    label_y = bar_y + _BAR_HEIGHT + 1
    return _Layout(tuple(lines), bar_y, label_y, label_y + line_height(LABEL_SIZE) + 3)


def header_height(header: Header, width: int) -> int:
    """Height in pixels of ``header`` drawn ``width`` pixels wide."""
    return _layout(header, width).height


def _colour_bar() -> U8Array:
    levels = np.rint(np.linspace(0, N_LEVELS - 1, _BAR_WIDTH)).astype(np.uint8)
    return np.broadcast_to(levels, (_BAR_HEIGHT, _BAR_WIDTH))


def _draw_header(canvas: U8Array, header: Header, layout: _Layout) -> None:
    for text, size, y in layout.lines:
        paste_text(canvas, text, size, PAD, y)

    bar_x, bar_y, label_y = PAD, layout.bar_y, layout.label_y
    canvas[bar_y : bar_y + _BAR_HEIGHT, bar_x : bar_x + _BAR_WIDTH] = _colour_bar()
    low, *middle, high = header.labels
    paste_text(canvas, low, LABEL_SIZE, bar_x, label_y)
    high_x = max(bar_x, bar_x + _BAR_WIDTH - text_width(high, LABEL_SIZE) + 2)
    paste_text(canvas, high, LABEL_SIZE, high_x, label_y)
    for centre in middle:
        centre_x = bar_x + _BAR_WIDTH // 2 - text_width(centre, LABEL_SIZE) // 2 + 1
        paste_text(canvas, centre, LABEL_SIZE, centre_x, label_y)

    if header.nonfinite:
        swatch_x = bar_x + _BAR_WIDTH + 20
        canvas[bar_y : bar_y + _BAR_HEIGHT, swatch_x : swatch_x + _BAR_HEIGHT] = NONFINITE
        legend_y = bar_y + _BAR_HEIGHT // 2 - line_height(LABEL_SIZE) // 2
        paste_text(canvas, _NONFINITE_LEGEND, LABEL_SIZE, swatch_x + _BAR_HEIGHT + 4, legend_y)


def bar_box(header: Header, width: int) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of the colour bar in ``header`` drawn ``width`` wide,
    for a picture whose colours are not a colormap's (flow fields) to paint its own key."""
    return _layout(header, width).bar_y, PAD, _BAR_HEIGHT, _BAR_WIDTH


def new_canvas(
    body_height: int, body_width: int, header: Header, *, min_width: int = HEADER_MIN_WIDTH
) -> tuple[U8Array, int]:
    """A BACKGROUND canvas as wide as the body (at least ``min_width``) with the header
    drawn, its text wrapped to that width; returns the canvas and the header height."""
    width = max(body_width, min_width)
    layout = _layout(header, width)
    canvas = np.full((layout.height + body_height, width), BACKGROUND, dtype=np.uint8)
    _draw_header(canvas, header, layout)
    return canvas, layout.height
