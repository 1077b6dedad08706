"""Laying palette levels out as tiles: one tile per channel, with gaps between and around.

Tiles are placed with array operations only (integer nearest-neighbour upscaling, one reshape
into rows and columns), so a layer of hundreds of channels costs a few copies, not a loop.
"""

from __future__ import annotations

import numpy as np

from actviz.render.palette import BACKGROUND, U8Array

__all__ = ["GAP", "tile_grid"]

GAP = 2
"""Pixels of ``BACKGROUND`` between tiles and around the grid."""


def tile_grid(levels: U8Array, columns: int, upscale: int) -> U8Array:
    """Lay ``(k, h, w)`` tiles out row-major with GAP pixels between and around them."""
    count, height, width = levels.shape
    rows = -(-count // columns)
    tile_h, tile_w = height * upscale, width * upscale
    if upscale > 1:
        shape = (count, height, upscale, width, upscale)
        levels = np.broadcast_to(levels[:, :, None, :, None], shape).reshape(count, tile_h, tile_w)
    cells = np.full((rows * columns, tile_h + GAP, tile_w + GAP), BACKGROUND, dtype=np.uint8)
    cells[:count, :tile_h, :tile_w] = levels
    grid = cells.reshape(rows, columns, tile_h + GAP, tile_w + GAP).transpose(0, 2, 1, 3)
    body = np.full(
        (GAP + rows * (tile_h + GAP), GAP + columns * (tile_w + GAP)), BACKGROUND, np.uint8
    )
    body[GAP:, GAP:] = grid.reshape(rows * (tile_h + GAP), columns * (tile_w + GAP))
    return body
