"""Receptive fields measured from the model: the input pixels one map cell depends on.

Nothing is hard-coded per architecture. A probe input (noise from a fixed seed) runs through
the model once with gradients on; for each layer, the sum over channels at one map cell is
differentiated with respect to the input, and the bounding box of the pixels with a nonzero
gradient is that cell's receptive field. Three cells are probed at once (three images of the
probe batch): the centre, the top-left and the bottom-right. A side of the box that touches
the image border says only "at least this far", so each side is taken from a probe where it
did not touch; a side that touched in every probe reaches past the image (ViT tokens attend
to everything, a ResNet's last stage sees more than 224 pixels), and boxes extend to the
border there.

A field is stored as the four distances from a cell's centre (in input pixels) to the box's
sides, plus the map's stride, so the box of any cell is one addition away
(:meth:`ReceptiveField.box`), clipped to the image. Pure arithmetic; no torch here except in
:func:`measure_fields`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

__all__ = ["ReceptiveField", "measure_fields", "probe_cells"]


@dataclass(frozen=True)
class ReceptiveField:
    """The input region behind each cell of one layer's map grid.

    Attributes:
        input_size: ``(height, width)`` of the model input.
        map_size: ``(rows, columns)`` of the layer's map grid.
        up: Pixels from a cell's centre up to the top of its field; None: past the image.
        down: To the bottom (exclusive edge); None: past the image.
        left: To the left side; None: past the image.
        right: To the right side (exclusive edge); None: past the image.
        note: Why the field could not be measured (it is the whole image then), or None.
    """

    input_size: tuple[int, int]
    map_size: tuple[int, int]
    up: float | None
    down: float | None
    left: float | None
    right: float | None
    note: str | None = None

    @classmethod
    def whole(
        cls, input_size: tuple[int, int], map_size: tuple[int, int], note: str | None
    ) -> ReceptiveField:
        """A field that covers the whole image from every cell."""
        return cls(input_size, map_size, None, None, None, None, note)

    @property
    def stride(self) -> tuple[float, float]:
        """Input pixels per map cell, down and across."""
        return (
            self.input_size[0] / self.map_size[0],
            self.input_size[1] / self.map_size[1],
        )

    @property
    def whole_image(self) -> bool:
        """Whether every cell's field covers the whole image."""
        return all(
            self.box(y, x) == (0, self.input_size[0], 0, self.input_size[1])
            for y, x in ((0, 0), (self.map_size[0] - 1, self.map_size[1] - 1))
        )

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` in pixels of the field of a cell in the middle of the map,
        clipped to the image."""
        top, bottom, left, right = self.box(self.map_size[0] // 2, self.map_size[1] // 2)
        return bottom - top, right - left

    def box(self, y: int, x: int) -> tuple[int, int, int, int]:
        """``(top, bottom, left, right)`` pixels of the field of cell ``(y, x)``, the bottom and
        right edges exclusive, clipped to the image."""
        height, width = self.input_size
        sy, sx = self.stride
        cy, cx = (y + 0.5) * sy, (x + 0.5) * sx
        top = 0 if self.up is None else _clip(_round(cy - self.up), height)
        bottom = height if self.down is None else _clip(_round(cy + self.down), height)
        left = 0 if self.left is None else _clip(_round(cx - self.left), width)
        right = width if self.right is None else _clip(_round(cx + self.right), width)
        if bottom <= top:  # a degenerate measurement: keep at least the cell's own pixel
            top, bottom = _clip(int(cy), height - 1), _clip(int(cy), height - 1) + 1
        if right <= left:
            left, right = _clip(int(cx), width - 1), _clip(int(cx), width - 1) + 1
        return top, bottom, left, right

    def windows(self) -> tuple[int, int, npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The heat-map window of each argmax cell: ``(rows, columns, first_row[y],
        first_column[x])``: a window of ``rows x columns`` cells starting at
        ``(first_row[y], first_column[x])`` covers the field of cell ``(y, x)``."""
        rows, first_rows = self._axis(0)
        columns, first_columns = self._axis(1)
        return rows, columns, first_rows, first_columns

    def _axis(self, axis: int) -> tuple[int, npt.NDArray[np.int32]]:
        cells = self.map_size[axis]
        step = self.stride[axis]
        spans = []
        for i in range(cells):
            top, bottom, left, right = self.box(i, 0) if axis == 0 else self.box(0, i)
            lo, hi = (top, bottom) if axis == 0 else (left, right)
            first = min(cells - 1, int(lo // step))
            last = min(cells - 1, max(first, math.ceil(hi / step) - 1))
            spans.append((first, last))
        size = max(last - first + 1 for first, last in spans)
        starts = np.array([min(first, cells - size) for first, _ in spans], dtype=np.int32)
        return size, np.maximum(starts, 0)

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the field's size in the middle of the map, the stride, and whether it
        is the whole image."""
        height, width = self.size
        return {
            "height": height,
            "width": width,
            "stride": [round(s, 4) for s in self.stride],
            "whole_image": self.whole_image,
            "note": self.note,
        }


def _round(value: float) -> int:
    return math.floor(value + 0.5)


def _clip(value: int, limit: int) -> int:
    return min(max(value, 0), limit)


def probe_cells(map_size: tuple[int, int]) -> list[tuple[int, int]]:
    """The three cells probed: the centre, the top-left and the bottom-right."""
    rows, columns = map_size
    return [(rows // 2, columns // 2), (0, 0), (rows - 1, columns - 1)]


def field_from_boxes(
    input_size: tuple[int, int],
    map_size: tuple[int, int],
    boxes: Sequence[tuple[tuple[int, int], tuple[int, int, int, int] | None]],
) -> ReceptiveField:
    """Combine measured boxes ``(cell, (top, bottom, left, right) or None)`` into a field.

    Each side comes from the probes where it did not touch the image's border (the largest
    distance among them: a gradient can miss a pixel, never add one); a side that touched
    everywhere reaches past the image.
    """
    height, width = input_size
    sy, sx = input_size[0] / map_size[0], input_size[1] / map_size[1]
    sides: dict[str, list[float]] = {"up": [], "down": [], "left": [], "right": []}
    measured = False
    for (y, x), box in boxes:
        if box is None:
            continue
        measured = True
        top, bottom, left, right = box
        cy, cx = (y + 0.5) * sy, (x + 0.5) * sx
        if top > 0:
            sides["up"].append(cy - top)
        if bottom < height:
            sides["down"].append(bottom - cy)
        if left > 0:
            sides["left"].append(cx - left)
        if right < width:
            sides["right"].append(right - cx)
    if not measured:
        return ReceptiveField.whole(
            input_size, map_size, "no input pixel changes this layer; shown as the whole image"
        )
    extent = {side: max(values) if values else None for side, values in sides.items()}
    return ReceptiveField(
        input_size,
        map_size,
        up=extent["up"],
        down=extent["down"],
        left=extent["left"],
        right=extent["right"],
    )


def measure_fields(
    maps: Mapping[str, torch.Tensor],
    x: torch.Tensor,
) -> dict[str, ReceptiveField]:
    """Measure each layer's receptive field from its maps of the probe batch.

    Args:
        maps: Capture key -> ``(3, C, H, W)`` maps of the probe batch ``x`` (in the graph).
        x: The probe batch, ``(3, channels, height, width)``, with ``requires_grad``.

    Returns:
        Capture key -> its field; a field that cannot be measured (the layer does not depend
        on the input through differentiable operations) is the whole image, with a note.
    """
    import torch

    input_size = (int(x.shape[2]), int(x.shape[3]))
    fields: dict[str, ReceptiveField] = {}
    for key, layer_maps in maps.items():
        map_size = (int(layer_maps.shape[2]), int(layer_maps.shape[3]))
        cells = probe_cells(map_size)
        if not layer_maps.requires_grad:
            fields[key] = ReceptiveField.whole(
                input_size, map_size, "output has no gradient; shown as the whole image"
            )
            continue
        target = torch.stack(
            [layer_maps[i, :, y, x_].float().sum() for i, (y, x_) in enumerate(cells)]
        ).sum()
        try:
            (grad,) = torch.autograd.grad(target, x, retain_graph=True, allow_unused=True)
        except RuntimeError as exc:
            from actviz.errors import first_line

            fields[key] = ReceptiveField.whole(
                input_size, map_size, f"cannot backpropagate ({first_line(exc)}); whole image"
            )
            continue
        boxes: list[tuple[tuple[int, int], tuple[int, int, int, int] | None]] = []
        for i, cell in enumerate(cells):
            touched = (grad[i].abs().sum(dim=0) > 0) if grad is not None else None
            boxes.append((cell, _bounding_box(touched)))
        fields[key] = field_from_boxes(input_size, map_size, boxes)
    return fields


def _bounding_box(mask: torch.Tensor | None) -> tuple[int, int, int, int] | None:
    if mask is None or not bool(mask.any()):
        return None
    rows = mask.any(dim=1).nonzero().flatten()
    columns = mask.any(dim=0).nonzero().flatten()
    return int(rows[0]), int(rows[-1]) + 1, int(columns[0]), int(columns[-1]) + 1
