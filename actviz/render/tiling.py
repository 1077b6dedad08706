"""Laying palette levels out as tiles: one tile per channel, with gaps between and around.

Tiles are placed with array operations only (integer nearest-neighbour upscaling, one reshape
into rows and columns), so a layer of hundreds of channels costs a few copies, not a loop.
Each tile carries its channel index in a thin band above it, in ``LABEL``, so a grid can be
read at 1:1 without counting tiles; cells widen when a label is wider than its tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actviz.render.legend import TILE_LABEL_SIZE, digit_rows, paste_text, text_width
from actviz.render.palette import BACKGROUND, LABEL, U8Array

__all__ = ["GAP", "TileLayout", "tile_grid", "tile_layout"]

GAP = 2
"""Pixels of ``BACKGROUND`` between tiles and around the grid."""
_LABEL_PAD = 1


@dataclass(frozen=True)
class TileLayout:
    """Where tiles go in a grid body.

    Attributes:
        label_height: Pixels of the label band above each tile (0 without labels).
        pitch: ``(rows, columns)`` pixel distance from one tile to the next, gap included.
    """

    label_height: int
    pitch: tuple[int, int]

    def origin(self, position: int, columns: int) -> tuple[int, int]:
        """``(top, left)`` of the tile at ``position`` (display order) in the body."""
        row, column = divmod(position, columns)
        return GAP + self.label_height + row * self.pitch[0], GAP + column * self.pitch[1]


def tile_layout(tile_h: int, tile_w: int, labels: Sequence[str] | None) -> TileLayout:
    """The layout of tiles ``tile_h x tile_w`` with these labels above them (or none)."""
    if not labels:
        return TileLayout(0, (tile_h + GAP, tile_w + GAP))
    top, bottom = digit_rows(TILE_LABEL_SIZE)
    band = bottom - top + 1 + 2 * _LABEL_PAD
    widest = max(text_width(label, TILE_LABEL_SIZE) for label in labels)
    return TileLayout(band, (band + tile_h + GAP, max(tile_w, widest) + GAP))


def tile_grid(
    levels: U8Array, columns: int, upscale: int, labels: Sequence[str] | None = None
) -> U8Array:
    """Lay ``(k, h, w)`` tiles out row-major with GAP pixels between and around them, each
    under its label when ``labels`` (one per tile) are given."""
    count, height, width = levels.shape
    rows = -(-count // columns)
    tile_h, tile_w = height * upscale, width * upscale
    layout = tile_layout(tile_h, tile_w, labels)
    pitch_h, pitch_w = layout.pitch
    band = layout.label_height
    if upscale > 1:
        shape = (count, height, upscale, width, upscale)
        levels = np.broadcast_to(levels[:, :, None, :, None], shape).reshape(count, tile_h, tile_w)
    cells = np.full((rows * columns, pitch_h, pitch_w), BACKGROUND, dtype=np.uint8)
    cells[:count, band : band + tile_h, :tile_w] = levels
    grid = cells.reshape(rows, columns, pitch_h, pitch_w).transpose(0, 2, 1, 3)
    body = np.full((GAP + rows * pitch_h, GAP + columns * pitch_w), BACKGROUND, np.uint8)
    body[GAP:, GAP:] = grid.reshape(rows * pitch_h, columns * pitch_w)
    if labels:
        skip = digit_rows(TILE_LABEL_SIZE)[0]
        for position, label in enumerate(labels[:count]):
            top, left = layout.origin(position, columns)
            y = top - band + _LABEL_PAD
            paste_text(body, label, TILE_LABEL_SIZE, left, y, colour=LABEL, skip=skip)
    return body
