"""The atlas's pictures: each cell's nearest real images (or patches) cut from what the model
saw, all in one sheet of tiles the page draws from (``atlas-tiles.png``), and ``atlas.png``.

A tile is the model's view of the image (preprocessed as for the model, then de-normalized,
:func:`actviz.top_images.draw.model_view`): the whole view for a pooled point, the receptive
field of its map position for a spatial one (measured from the model,
:mod:`actviz.top_images.fields`), fitted to a square. Images are decoded once each, in order,
and cut as they come: memory holds the tiles, never the views of every image.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.atlas.layout import Laid, cell_members
from actviz.atlas.stream import Side
from actviz.io.loader import decode_batches
from actviz.render.atlas import cells_picture, legend_picture, scatter_picture, stack
from actviz.render.panels import Panel, panel_sheet
from actviz.top_images.draw import model_view
from actviz.top_images.sheets import crop_view

if TYPE_CHECKING:
    from actviz.atlas.options import AtlasOptions

__all__ = ["SPRITE_COLUMNS", "TILE", "atlas_png", "cut_tiles", "sprite_png"]

U8 = npt.NDArray[np.uint8]
#: Side of a tile in the sheet, in pixels.
TILE = 64
#: Tiles per row of the sheet.
SPRITE_COLUMNS = 32
#: The scatter's side in ``atlas.png``.
SCATTER = 640


def cut_tiles(
    sides: Sequence[Side], laid: Laid, paths: Sequence[Path], opts: AtlasOptions
) -> tuple[U8, npt.NDArray[np.int64]]:
    """The tiles of every kept cell's nearest points: ``(M, TILE, TILE, 3)``, and per cell and
    rank the tile's index (-1 where the cell has fewer points)."""

    nearest = laid.cells.nearest
    points = sorted({int(p) for p in nearest.reshape(-1) if p >= 0})
    tile_of = {p: i for i, p in enumerate(points)}
    tiles = np.empty((len(points), TILE, TILE, 3), np.uint8)
    tiles[:] = 38
    by_image: dict[int, list[int]] = {}
    for p in points:
        by_image.setdefault(int(laid.image[p]), []).append(p)
    order = sorted(by_image)
    loaded = sides[0].loaded
    decoded = decode_batches([paths[i] for i in order], loaded.preprocess, batch_size=8)
    try:
        for batch in decoded:
            for item in batch:
                if item.tensor is None:
                    continue  # unreadable now: its tiles stay blank
                view = Image.fromarray(model_view(item.tensor, loaded))
                for p in by_image[order[item.index]]:
                    box = _box(sides[int(laid.side[p])], int(laid.position[p]), view.size)
                    crop = crop_view(view, box, TILE)
                    top = (TILE - crop.shape[0]) // 2
                    left = (TILE - crop.shape[1]) // 2
                    tiles[tile_of[p], top : top + crop.shape[0], left : left + crop.shape[1]] = crop
    finally:
        decoded.close()
    index = np.vectorize(lambda p: tile_of.get(int(p), -1), otypes=[np.int64])(nearest)
    return tiles, index.reshape(nearest.shape)


def _box(side: Side, position: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)`` of a point's part of the view: the whole view for a
    pooled point, its position's receptive field for a spatial one."""
    width, height = size
    if position < 0:
        return 0, height, 0, width
    plan = side.plan
    top, bottom, left, right = plan.receptive.box(position // plan.width, position % plan.width)
    return min(top, height - 1), min(bottom, height), min(left, width - 1), min(right, width)


def sprite_png(tiles: U8) -> bytes:
    """The square tiles in rows of :data:`SPRITE_COLUMNS`, as one PNG (a blank tile when
    none)."""
    from actviz.render.png import encode_png

    side = tiles.shape[1] if len(tiles) else TILE
    count = max(1, len(tiles))
    columns = min(SPRITE_COLUMNS, count)
    rows = -(-count // columns)
    sheet = np.full((rows * side, columns * side, 3), 38, np.uint8)
    for i, tile in enumerate(tiles):
        row, column = divmod(i, columns)
        sheet[row * side : (row + 1) * side, column * side : (column + 1) * side] = tile
    return encode_png(sheet, row_filter="up")


def cell_pictures(laid: Laid, tiles: U8, index: npt.NDArray[np.int64], icons: U8 | None) -> U8:
    """Each kept cell's picture in ``atlas.png``: its icon, else its nearest real point."""
    count = len(laid.cells.kept)
    if icons is not None:
        return icons
    pictures = np.full((count, TILE, TILE, 3), 38, np.uint8)
    for j in range(count):
        if index[j, 0] >= 0:
            pictures[j] = tiles[index[j, 0]]
    return pictures


def cell_frames(laid: Laid) -> U8:
    """Each kept cell's frame colour: what its points mostly are (or their mean value)."""

    groups = cell_members(laid.cells)
    frames = np.zeros((len(laid.cells.kept), 3), np.uint8)
    for j, cell in enumerate(laid.cells.kept):
        frames[j] = laid.coloured.cell_summary(groups[int(cell)])["rgb"]
    return frames


def atlas_png(
    laid: Laid, pictures: U8, frames: U8, *, title: str, lines: Sequence[str], what: str, seed: int
) -> bytes:
    """The scatter of every point beside the cells, the facts above, the legend below."""
    from actviz.render.png import encode_png

    grid = laid.cells.grid
    scatter = scatter_picture(laid.xy, laid.coloured.rgb, size=SCATTER, grid=grid, seed=seed)
    tile = max(8, SCATTER // grid)
    cells = cells_picture(grid, [int(c) for c in laid.cells.kept], pictures, frames, tile=tile)
    panels = [
        Panel(scatter, f"{len(laid.xy):,} points, coloured by {laid.coloured.name}"),
        Panel(cells, f"{len(laid.cells.kept):,} cells: {what}"),
    ]
    sheet = panel_sheet(title, lines, panels, columns=2)
    legend: Any = legend_picture(laid.coloured.legend(), sheet.shape[1])
    return encode_png(stack([sheet, legend]), row_filter="up")
