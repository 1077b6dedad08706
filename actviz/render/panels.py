"""RGB panels under a text header: the sheets of pictures that are already colours
(optimized images, principal components shown as RGB), where no colour bar applies.

Pure arrays: lines of text and ``(H, W, 3)`` panels in, one ``(H, W, 3)`` uint8 picture out.
The sheet without its panels (background, header, labels) is kept for the last few layouts:
a run draws one sheet per layer and image, and every image of a layer has the same header, so
only the panels are pasted again. A one-column sheet may also be made band by band
(:func:`text_band`, then :func:`panel_band` for each panel), for a caller that encodes the
bands that pictures share only once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render.legend import line_height, paste_text, text_width, wrap_text
from actviz.render.palette import BACKGROUND, LABEL, palette_for
from actviz.render.theme import INFO_SIZE, PAD, PANEL_GAP, PANEL_LABEL_SIZE, SHEET_TITLE_SIZE

__all__ = ["Panel", "panel_band", "panel_bands", "panel_sheet", "sheet_width", "text_band"]

U8 = npt.NDArray[np.uint8]

_MIN_WIDTH = 360
_FRAMES = 8
"""Frames kept: a few layers drawn at once in the render threads."""


@dataclass(frozen=True)
class Panel:
    """One picture of a sheet and the line under it; ``scale``: each pixel drawn as a block
    of that many pixels a side (nearest-neighbour enlargement, made as it is pasted)."""

    pixels: U8
    label: str = ""
    scale: int = 1

    @property
    def size(self) -> tuple[int, int]:
        """Height and width on the sheet."""
        return self.pixels.shape[0] * self.scale, self.pixels.shape[1] * self.scale


def _fit(text: str, width: int) -> str:
    while len(text) > 1 and text_width(text, PANEL_LABEL_SIZE) > width:
        text = text[:-2] + "…"
    return text


def panel_sheet(
    title: str, lines: Sequence[str], panels: Sequence[Panel], *, columns: int = 8
) -> U8:
    """Panels in rows of ``columns`` under a title and wrapped info lines; each panel keeps
    its own size, laid on a grid of the largest one.

    Returns:
        ``(H, W, 3)`` uint8.
    """
    count = max(1, len(panels))
    columns = max(1, min(columns, count))
    cell_h = max((p.size[0] for p in panels), default=1)
    cell_w = max((p.size[1] for p in panels), default=1)
    labels = tuple(p.label for p in panels)
    frame, spots = _frame(title, tuple(lines), labels, columns, cell_h, cell_w)
    rgb = frame.copy()
    for (top, left), panel in zip(spots, panels, strict=True):
        h, w = panel.size
        _paste(rgb[top : top + h, left : left + w], panel.pixels, panel.scale)
    return rgb


def _paste(target: U8, pixels: U8, scale: int) -> None:
    """``(..., h, w, 3)`` pixels into ``target``, each one a ``scale`` x ``scale`` block: the
    rows widened once, then each written ``scale`` times through a strided view of the target
    (whole rows at a time, no enlarged copy). Leading axes are pictures, pasted at once."""
    if scale == 1:
        target[...] = pixels
        return
    wide = pixels.repeat(scale, axis=-2)
    rows = target.strides[-3]
    blocks = np.lib.stride_tricks.as_strided(
        target,
        shape=(*pixels.shape[:-2], scale, *target.shape[-2:]),
        strides=(*target.strides[:-3], rows * scale, rows, *target.strides[-2:]),
        writeable=True,
    )
    blocks[...] = wide[..., None, :, :]


@functools.lru_cache(maxsize=_FRAMES)
def _frame(
    title: str,
    lines: tuple[str, ...],
    labels: tuple[str, ...],
    columns: int,
    cell_h: int,
    cell_w: int,
) -> tuple[U8, tuple[tuple[int, int], ...]]:
    """The sheet without its panels, read-only, and the top-left corner of each panel."""
    rows = -(-max(1, len(labels)) // columns)
    strip = line_height(PANEL_LABEL_SIZE) + 2 if any(labels) else 0
    body_w = PANEL_GAP + columns * (cell_w + PANEL_GAP)
    width = max(body_w, _MIN_WIDTH)
    placed, head = _placed(title, lines, width)
    height = head + rows * (cell_h + strip + PANEL_GAP) + PANEL_GAP
    canvas = np.full((height, width), BACKGROUND, dtype=np.uint8)
    for text, size, top in placed:
        paste_text(canvas, text, size, PAD, top)
    spots = []
    for i, label in enumerate(labels):
        row, column = divmod(i, columns)
        top = head + row * (cell_h + strip + PANEL_GAP)
        left = PANEL_GAP + column * (cell_w + PANEL_GAP)
        if label:
            paste_text(
                canvas, _fit(label, cell_w), PANEL_LABEL_SIZE, left, top + cell_h + 1, colour=LABEL
            )
        spots.append((top, left))
    return _rgb(canvas), tuple(spots)


def sheet_width(panel_width: int) -> int:
    """The width of a sheet of one column of panels at most ``panel_width`` wide."""
    return max(panel_width + 2 * PANEL_GAP, _MIN_WIDTH)


@functools.lru_cache(maxsize=_FRAMES)
def text_band(title: str, lines: tuple[str, ...], width: int) -> U8:
    """A sheet's header as a band of its own, ``width`` wide (read-only): the title and the
    wrapped lines, as :func:`panel_sheet` draws them."""
    placed, height = _placed(title, lines, width)
    canvas = np.full((height, width), BACKGROUND, dtype=np.uint8)
    for text, size, top in placed:
        paste_text(canvas, text, size, PAD, top)
    return _rgb(canvas)


def panel_band(panel: Panel, width: int) -> U8:
    """One panel as a band of a one-column sheet, ``width`` wide: the panel at the left edge
    with its label under it, as :func:`panel_sheet` lays out a row, and the gap below."""
    band: U8 = panel_bands(panel.pixels[None], panel.label, panel.scale, width)[0]
    return band


def panel_bands(pixels: U8, label: str, scale: int, width: int) -> U8:
    """:func:`panel_band` of each of ``(B, h, w, 3)`` pictures of the same size, label and
    scale, at once: ``(B, height, width, 3)``."""
    h, w = pixels.shape[1] * scale, pixels.shape[2] * scale
    empty = _label_band(label, h, w, width)
    bands = np.empty((len(pixels), *empty.shape), dtype=np.uint8)
    bands[...] = empty
    _paste(bands[:, :h, PANEL_GAP : PANEL_GAP + w], pixels, scale)
    return bands


@functools.lru_cache(maxsize=_FRAMES)
def _label_band(label: str, cell_h: int, cell_w: int, width: int) -> U8:
    """:func:`panel_band` without its panel (read-only)."""
    strip = line_height(PANEL_LABEL_SIZE) + 2 if label else 0
    canvas = np.full((cell_h + strip + PANEL_GAP, width), BACKGROUND, dtype=np.uint8)
    if label:
        paste_text(
            canvas, _fit(label, cell_w), PANEL_LABEL_SIZE, PANEL_GAP, cell_h + 1, colour=LABEL
        )
    return _rgb(canvas)


def _placed(title: str, lines: Sequence[str], width: int) -> tuple[list[tuple[str, int, int]], int]:
    """Where the title and the wrapped lines go (text, size, top), and the header's height."""
    placed: list[tuple[str, int, int]] = []
    y = PAD
    for text, size in [(title, SHEET_TITLE_SIZE)] + [(line, INFO_SIZE) for line in lines if line]:
        for part in wrap_text(text, size, width - 2 * PAD):
            placed.append((part, size, y))
            y += line_height(size) + 2
    return placed, y + PAD


def _rgb(canvas: U8) -> U8:
    """Grey levels drawn on the sheet's palette, as RGB (read-only)."""
    height, width = canvas.shape
    image = Image.frombytes("P", (width, height), canvas.tobytes())
    image.putpalette(palette_for("gray").tobytes(), rawmode="RGB")
    rgb: U8 = np.array(image.convert("RGB"))
    rgb.flags.writeable = False
    return rgb
