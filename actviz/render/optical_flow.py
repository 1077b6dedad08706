"""An optical-flow model's estimate at every refinement iteration, side by side, so a reader
sees it converge: the two pictures of the pair, a key of directions, then one flow field per
iteration drawn with torchvision's ``flow_to_image`` on one scale for all of them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from actviz.render.legend import (
    Header,
    bar_box,
    fmt_value,
    line_height,
    new_canvas,
    paste_text,
)
from actviz.render.palette import LABEL, palette_for
from actviz.render.theme import TILE_LABEL_SIZE
from actviz.render.tiling import GAP

__all__ = ["optical_flow_colours", "render_optical_flow"]

U8Array = npt.NDArray[np.uint8]


def optical_flow_colours(flows: npt.ArrayLike) -> U8Array:
    """``(N, 2, H, W)`` flow fields as ``(N, H, W, 3)`` RGB on one scale (the largest
    displacement of all of them is full saturation), with torchvision's colour wheel."""
    import torch
    from torchvision.utils import flow_to_image

    tensor = torch.as_tensor(np.asarray(flows, dtype=np.float32))
    rgb: U8Array = flow_to_image(tensor).permute(0, 2, 3, 1).numpy()
    return rgb


def _wheel(side: int) -> U8Array:
    """The key of directions: displacement towards each point from the centre."""
    axis = np.linspace(-1.0, 1.0, side, dtype=np.float32)
    v, u = np.meshgrid(axis, axis, indexing="ij")
    inside = u * u + v * v <= 1.0
    field = np.stack([u * inside, v * inside])[None]
    wheel: U8Array = optical_flow_colours(field)[0]
    return wheel


def _fit(tile: U8Array, side: int) -> U8Array:
    """A tile no larger than ``side`` on its longer side (nearest, whole steps)."""
    step = -(-max(tile.shape[:2]) // side)
    return tile[::step, ::step] if step > 1 else tile


def render_optical_flow(
    flows: npt.ArrayLike,
    *,
    title: str,
    pair: Sequence[U8Array] = (),
    notes: Sequence[str] = (),
    columns: int = 5,
    max_side: int = 256,
) -> U8Array:
    """Draw one pair's flow estimate at every iteration.

    Args:
        flows: ``(N, 2, H, W)``: iteration k's flow (pixels; channel 0 horizontal).
        title: The header's first line.
        pair: The two pictures of the pair as ``(H, W, 3)`` uint8, drawn first.
        notes: Further header lines.
        columns: Tiles per row.
        max_side: Tiles are shrunk (whole steps) until their longer side is at most this.

    Returns:
        The picture, ``(height, width, 3)`` uint8.

    Raises:
        ValueError: For flows that are not ``(N, 2, H, W)``.
    """
    array = np.asarray(flows, dtype=np.float32)
    if array.ndim != 4 or array.shape[1] != 2 or 0 in array.shape:
        raise ValueError(f"flows must be a non-empty (N, 2, H, W) array, got {array.shape}")
    count, _, height, width = array.shape
    coloured = optical_flow_colours(np.nan_to_num(array, nan=0.0, posinf=0.0, neginf=0.0))
    tiles = [_fit(np.asarray(p, dtype=np.uint8), max_side) for p in pair]
    names = ["frame 1", "frame 2"][: len(tiles)] + ["direction key"]
    tile_h, tile_w = _fit(coloured[0], max_side).shape[:2]
    tiles.append(_wheel(min(tile_h, tile_w)))
    tiles += [_fit(c, max_side) for c in coloured]
    names += [f"iteration {k + 1}" for k in range(count)]

    magnitude = np.sqrt((array**2).sum(axis=1))
    largest = float(magnitude.max())
    changes = [float(np.abs(array[k] - array[k - 1]).mean()) for k in range(1, count)]
    change_text = ", ".join(fmt_value(c) for c in changes[:12])
    header = Header(
        title=title,
        info=f"{count} iteration(s) on one scale  |  hue: direction, saturation: length  |  "
        f"largest displacement {fmt_value(largest)} px",
        labels=("0", f"{fmt_value(largest)} px right"),
        nonfinite=False,
        notes=(
            *notes,
            *([f"mean change from the iteration before (px): {change_text}"] if changes else []),
        ),
    )
    columns = max(1, min(columns, len(tiles)))
    label = line_height(TILE_LABEL_SIZE) + 2
    cell_h = max(t.shape[0] for t in tiles) + label + GAP
    cell_w = max(max(t.shape[1] for t in tiles), 80) + GAP
    rows = -(-len(tiles) // columns)
    body_h, body_w = GAP + rows * cell_h, GAP + columns * cell_w
    canvas, top = new_canvas(body_h, body_w, header)
    for position, name in enumerate(names):
        row, col = divmod(position, columns)
        paste_text(
            canvas,
            name,
            TILE_LABEL_SIZE,
            GAP + col * cell_w,
            top + GAP + row * cell_h,
            colour=LABEL,
        )
    rgb = palette_for("viridis")[canvas]
    bar_y, bar_x, bar_h, bar_w = bar_box(header, canvas.shape[1])
    ramp = np.zeros((1, 2, 1, bar_w), dtype=np.float32)
    ramp[0, 0, 0] = np.linspace(0.0, 1.0, bar_w)
    rgb[bar_y : bar_y + bar_h, bar_x : bar_x + bar_w] = optical_flow_colours(ramp)[0]
    for position, tile in enumerate(tiles):
        row, col = divmod(position, columns)
        y = top + GAP + row * cell_h + label
        x = GAP + col * cell_w
        rgb[y : y + tile.shape[0], x : x + tile.shape[1]] = tile[..., :3]
    return rgb
