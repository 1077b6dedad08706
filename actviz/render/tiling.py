"""Laying palette levels out as tiles: one tile per channel, with gaps between and around.

Tiles are placed with array operations only (integer nearest-neighbour upscaling, one reshape
into rows and columns), so a layer of hundreds of channels costs a few copies, not a loop.
Each tile carries its channel index in a thin band above it, in ``LABEL``, so a grid can be
read at 1:1 without counting tiles; cells widen when a label is wider than its tile. A token
layer's prefix tokens (class, register) can be drawn in a second thin band, between the label
and the tile: one ``PREFIX_CELL`` square per token, in the tile's own levels.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from actviz.render.legend import digit_rows, paste_text, text_width
from actviz.render.palette import BACKGROUND, LABEL, U8Array
from actviz.render.theme import TILE_LABEL_SIZE

__all__ = ["GAP", "PREFIX_CELL", "TileLayout", "body_shape", "tile_grid", "tile_layout"]

GAP = 2
"""Pixels of ``BACKGROUND`` between tiles and around the grid."""
PREFIX_CELL = 4
"""Side in pixels of one prefix token's square in the band above a tile."""
_LABEL_PAD = 1
_LABEL_SPACE = 6


@dataclass(frozen=True)
class TileLayout:
    """Where tiles go in a grid body.

    Attributes:
        label_height: Pixels of the bands above each tile (0 without labels or prefix
            tokens): the label, then the prefix tokens' squares and one pixel of gap.
        pitch: ``(rows, columns)`` pixel distance from one tile to the next, gap included.
        text_height: Pixels of the label band alone, where the prefix band starts.
    """

    label_height: int
    pitch: tuple[int, int]
    text_height: int = 0

    def origin(self, position: int, columns: int) -> tuple[int, int]:
        """``(top, left)`` of the tile at ``position`` (display order) in the body."""
        row, column = divmod(position, columns)
        return GAP + self.label_height + row * self.pitch[0], GAP + column * self.pitch[1]


def tile_layout(
    tile_h: int, tile_w: int, labels: Sequence[str] | None, prefix: int = 0
) -> TileLayout:
    """The layout of tiles ``tile_h x tile_w`` with these labels above them (or none), and
    a band of ``prefix`` token squares between label and tile when ``prefix`` > 0."""
    if not labels and prefix <= 0:
        return TileLayout(0, (tile_h + GAP, tile_w + GAP))
    text = widest = 0
    if labels:
        top, bottom = digit_rows(TILE_LABEL_SIZE)
        text = bottom - top + 1 + 2 * _LABEL_PAD
        widest = max(text_width(label, TILE_LABEL_SIZE) for label in labels)
    if prefix > 0:
        widest = max(widest, prefix * PREFIX_CELL)
    band = text + (PREFIX_CELL + 1 if prefix > 0 else 0)
    # A label wider than its tile sets the column's width: a space after it, so that it does
    # not run into the next column's label ("ch 0, frame 1 frame 2").
    wide = widest + _LABEL_SPACE if widest > tile_w else tile_w
    return TileLayout(band, (band + tile_h + GAP, wide + GAP), text)


def body_shape(count: int, columns: int, layout: TileLayout) -> tuple[int, int]:
    """``(height, width)`` of the body holding ``count`` tiles in ``columns`` columns."""
    rows = -(-count // columns)
    return GAP + rows * layout.pitch[0], GAP + columns * layout.pitch[1]


def tile_grid(
    levels: U8Array,
    columns: int,
    upscale: int,
    labels: Sequence[str] | None = None,
    *,
    out: U8Array | None = None,
    prefix: U8Array | None = None,
) -> U8Array:
    """Lay ``(k, h, w)`` tiles out row-major with GAP pixels between and around them, each
    under its label when ``labels`` (one per tile) are given, and under a band of its
    ``(k, p)`` prefix token levels when ``prefix`` is given.

    ``out``, when given, is a ``BACKGROUND`` region of :func:`body_shape` (a picture's body
    under its header) to draw into. The tiles are written through one strided view of the
    body, upscaled by broadcasting on the way, so a layer costs one pass over its pixels.
    """
    count, height, width = levels.shape
    labels = list(labels[:count]) if labels else None  # one per tile: the layout is theirs
    rows = -(-count // columns)
    tile_h, tile_w = height * upscale, width * upscale
    tokens = 0 if prefix is None else int(prefix.shape[1])
    layout = tile_layout(tile_h, tile_w, labels, tokens)
    shape = body_shape(count, columns, layout)
    if out is None:
        body = np.full(shape, BACKGROUND, dtype=np.uint8)
    elif out.shape != shape:
        raise ValueError(f"out must have the body's shape {shape}, got {out.shape}")
    else:
        body = out
    pitch_h, pitch_w = layout.pitch
    band = layout.label_height
    # (rows, tile_h, columns, tile_w) of the body, tile_h split into (h, upscale): splitting
    # an axis of a view is always a view, so the assignments land in the body.
    cells = body[GAP:, GAP:].reshape(rows, pitch_h, columns, pitch_w)
    tiles = cells[:, band : band + tile_h, :, :tile_w].reshape(
        rows, height, upscale, columns, tile_w
    )
    # Widened by np.repeat (contiguous rows), heightened by broadcasting into the view:
    # numpy copies long rows fast and runs of `upscale` bytes slowly.
    wide = levels.repeat(upscale, axis=2) if upscale > 1 else levels
    full, rest = divmod(count, columns)
    if full:
        whole = wide[: full * columns].reshape(full, columns, height, tile_w)
        tiles[:full] = whole.transpose(0, 2, 1, 3)[:, :, None]
    if rest:
        tiles[full, :, :, :rest] = wide[full * columns :].transpose(1, 0, 2)[:, None]
    if prefix is not None and tokens:
        top = layout.text_height
        squares = cells[:, top : top + PREFIX_CELL, :, : tokens * PREFIX_CELL]
        strip = prefix[:count].repeat(PREFIX_CELL, axis=1)  # (k, tokens * PREFIX_CELL)
        if full:
            squares[:full] = strip[: full * columns].reshape(full, columns, -1)[:, None]
        if rest:
            squares[full, :, :rest] = strip[full * columns :][None]
    if labels:
        ys, xs = _label_pixels(tuple(labels), columns, tile_h, tile_w, tokens)
        body[ys, xs] = LABEL
    return body


@functools.lru_cache(maxsize=64)
def _label_pixels(
    labels: tuple[str, ...], columns: int, tile_h: int, tile_w: int, prefix: int = 0
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Where the label pixels of a body go. The same for every image of a run's layer, so
    they are drawn once and the body of each picture gets them in one indexed assignment."""
    layout = tile_layout(tile_h, tile_w, labels, prefix)
    scratch = np.zeros(body_shape(len(labels), columns, layout), dtype=np.uint8)
    skip = digit_rows(TILE_LABEL_SIZE)[0]
    for position, label in enumerate(labels):
        top, left = layout.origin(position, columns)
        y = top - layout.label_height + _LABEL_PAD
        paste_text(scratch, label, TILE_LABEL_SIZE, left, y, colour=1, skip=skip)
    ys, xs = np.nonzero(scratch)
    ys.setflags(write=False)
    xs.setflags(write=False)
    return ys, xs
