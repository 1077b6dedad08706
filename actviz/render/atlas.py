"""The pictures of an activation atlas: the scatter of every point, the grid of cells each
shown by a picture (a real image or patch, or a feature visualization), and the legend; pure
numpy, nothing written.

The scatter draws every point it is given (one to five pixels each, by how many there are,
in a fixed shuffled order so no colour is always on top) over faint lines where the cells'
borders are; the cells picture places each kept cell's picture at its place in the grid,
framed in the colour of what its points are, and leaves dropped cells empty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from actviz.render.legend import line_height, paste_text, text_width
from actviz.render.theme import BACKGROUND_RGB, LABEL_SIZE, PAD, TEXT_RGB

__all__ = [
    "cells_picture",
    "dot_size",
    "legend_picture",
    "scatter_picture",
    "stack",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]

_LINES_RGB = (58, 58, 58)
_FRAME = 2


def scatter_picture(xy01: F32, rgb: U8, *, size: int, grid: int, seed: int = 0) -> U8:
    """``(size, size, 3)``: each point of the unit-square layout ``xy01`` in its colour, over
    the grid's cell borders."""
    canvas = np.empty((size, size, 3), np.uint8)
    canvas[:] = BACKGROUND_RGB
    for i in range(1, grid):
        at = round(i * size / grid)
        canvas[min(at, size - 1), :] = _LINES_RGB
        canvas[:, min(at, size - 1)] = _LINES_RGB
    if len(xy01) == 0:
        return canvas
    order = np.random.default_rng(seed).permutation(len(xy01))
    dot = dot_size(len(xy01))
    x = np.clip((xy01[order, 0] * (size - dot)).astype(np.int64), 0, size - dot)
    y = np.clip((xy01[order, 1] * (size - dot)).astype(np.int64), 0, size - dot)
    colours = rgb[order]
    for dy in range(dot):
        for dx in range(dot):
            canvas[y + dy, x + dx] = colours  # later points overwrite earlier ones
    return canvas


def dot_size(points: int) -> int:
    """Pixels a side of one point: larger the fewer there are, one beyond 20,000."""
    return 5 if points <= 1000 else 3 if points <= 5000 else 2 if points <= 20000 else 1


def cells_picture(
    grid: int,
    cells: Sequence[int],
    pictures: U8,
    frames: U8,
    *,
    tile: int,
) -> U8:
    """``(grid * tile, grid * tile, 3)``: picture ``j`` (``(tile, tile, 3)``, already fitted)
    of cell ``cells[j]`` (``row * grid + column``) at its place, framed in ``frames[j]``."""
    side = grid * tile
    canvas = np.empty((side, side, 3), np.uint8)
    canvas[:] = BACKGROUND_RGB
    inner = tile - 2 * _FRAME
    for j, cell in enumerate(cells):
        row, column = divmod(int(cell), grid)
        top, left = row * tile, column * tile
        canvas[top : top + tile, left : left + tile] = frames[j]
        if inner > 0:
            canvas[top + _FRAME : top + tile - _FRAME, left + _FRAME : left + tile - _FRAME] = _fit(
                pictures[j], inner
            )
    return canvas


def _fit(picture: U8, side: int) -> U8:
    """A square picture resized to ``side`` (nearest neighbour: a tile is already small)."""
    height, width = picture.shape[:2]
    if (height, width) == (side, side):
        return picture
    rows = np.minimum((np.arange(side) * height) // side, height - 1)
    columns = np.minimum((np.arange(side) * width) // side, width - 1)
    fitted: U8 = picture[rows][:, columns]
    return fitted


def legend_picture(entries: Sequence[tuple[tuple[int, int, int], str]], width: int) -> U8:
    """Swatches and their labels, flowed into rows ``width`` wide."""
    line = line_height(LABEL_SIZE)
    swatch = line - 4
    placed: list[tuple[int, int, tuple[int, int, int], str]] = []
    x = y = PAD
    for colour, label in entries:
        need = swatch + 4 + text_width(label, LABEL_SIZE) + 14
        if x > PAD and x + need > width:
            x, y = PAD, y + line + 4
        placed.append((x, y, colour, label))
        x += need
    height = y + line + PAD
    mask = np.zeros((height, width), np.uint8)
    canvas = np.empty((height, width, 3), np.uint8)
    canvas[:] = BACKGROUND_RGB
    for x, y, colour, label in placed:
        canvas[y + 2 : y + 2 + swatch, x : x + swatch] = colour
        paste_text(mask, label, LABEL_SIZE, x + swatch + 4, y, colour=1)
    canvas[mask == 1] = TEXT_RGB
    return canvas


def stack(rows: Sequence[U8]) -> U8:
    """Pictures one under the other, left-aligned, on the background, as wide as the widest."""
    width = max(r.shape[1] for r in rows)
    out = np.empty((sum(r.shape[0] for r in rows), width, 3), np.uint8)
    out[:] = BACKGROUND_RGB
    top = 0
    for r in rows:
        out[top : top + r.shape[0], : r.shape[1]] = r
        top += r.shape[0]
    return out
