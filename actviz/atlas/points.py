"""The atlas's points, taken in the forward hook where the layer's output lives (GPU or CPU),
and the store that keeps them.

A layer's output is read as ``(C, H, W)`` maps through the plan top-images makes
(:func:`actviz.top_images.plan_layers`, the grids' own layout decisions: a ViT's class and
register tokens dropped, channels-last blocks transposed). ``pooled`` keeps each image's
spatial mean, reduced in the hook, so only ``(B, C)`` numbers leave the device; ``spatial:K``
keeps the batch's maps on the device (a copy: a later in-place op of the model cannot change
them) until the images of the batch are known, then gathers K positions per image, drawn from
the seed and the image's name, so a resumed run draws the same ones.

Memory is bounded by what is kept, never by the maps: one ``(images x K, C)`` float32 array,
allocated once, and one batch of maps in spatial mode.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.atlas.options import Points
from actviz.errors import UsageError
from actviz.hooks import HookSession, tensor_items
from actviz.top_images.plan import as_maps
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.top_images.plan import LayerPlan

__all__ = ["PointRecorder", "PointStore", "draw_positions"]

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]


def draw_positions(seed: int, image: str, cells: int, k: int) -> I32:
    """``min(k, cells)`` distinct map positions (flat, row-major) of one image, from the seed
    and the image's name alone: the same whatever batch it falls in and on a resume."""
    rng = np.random.default_rng([seed, zlib.crc32(image.encode("utf-8", "replace"))])
    picked = rng.choice(cells, size=min(k, cells), replace=False)
    return np.sort(picked).astype(np.int32)


def maps_for(tensor: torch.Tensor, plan: LayerPlan) -> torch.Tensor | None:
    """A batch of the layer's outputs as ``(B, C, H, W)`` maps: through the plan when the
    shape is the planned one, as they are for a channels-first map of another size (an image
    the preprocessing did not crop to one size); None when they cannot be read."""

    if tuple(tensor.shape[1:]) == plan.shape:
        return as_maps(tensor, plan)
    if plan.mode == "nchw" and tensor.ndim == 4 and tensor.shape[1] == plan.channels:
        return tensor
    if plan.mode == "nhwc" and tensor.ndim == 4 and tensor.shape[3] == plan.channels:
        return tensor.permute(0, 3, 1, 2)
    return None


class PointRecorder(HookSession):
    """The planned layer's points of the latest forward.

    After a forward, :meth:`take` gives ``(rows, C)`` float32 vectors on the CPU and each
    row's map position for the images of the batch (their names: the positions of spatial
    points depend on them).

    Raises (from :meth:`take`):
        UsageError: When the layer did not run, or gave an output that is not the planned
            maps (another size of a layout that cannot be read at any size).
    """

    def __init__(self, model: nn.Module, plan: LayerPlan, points: Points, seed: int) -> None:
        super().__init__(model, [plan.module])
        self.plan = plan
        self.points = points
        self.seed = seed
        self._kept: torch.Tensor | None = None
        self._unfit: tuple[int, ...] | None = None
        self._rows = ImageRows(model)  # attached on enter, as every recorder's

    def _start_record(self) -> None:
        super()._start_record()
        self._kept = None
        self._unfit = None

    def _register(self, name: str, module: nn.Module) -> None:
        import torch

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            raw = next(
                (t for element, t in tensor_items(output) if key + element == self.plan.key), None
            )
            if raw is None:
                return
            tensor, _ = self._rows.split(name, raw)
            if tensor is None:
                return
            maps = maps_for(tensor.detach(), self.plan)
            if maps is None:
                self._unfit = tuple(tensor.shape[1:])
                return
            if self.points.kind == "pooled":
                # Reduced where it lives: only (B, C) numbers are copied off the device.
                self._kept = maps.mean(dim=(2, 3), dtype=torch.float32).cpu()
            else:
                self._kept = maps.to(torch.float32, copy=True)

        self._add_forward_hook(module, hook)

    def take(self, images: list[str]) -> tuple[F32, I32]:
        """The latest forward's points of ``images`` (its rows, in order): ``(rows, C)``
        vectors and each row's flat map position (-1 for a pooled vector)."""
        kept, self._kept = self._kept, None
        if kept is None:
            plan = self.plan
            if self._unfit is not None:
                raise UsageError(
                    f"layer {plan.key} gave {self._unfit} per image where {plan.shape} was "
                    "planned (the preprocessing keeps each image's size); pass --input-size "
                    "H,W so every image is cropped to one size"
                )
            raise UsageError(f"layer {plan.key} did not run in the forward pass; choose another")
        if self.points.kind == "pooled":
            return kept.numpy(), np.full(len(images), -1, np.int32)
        return self._gather(kept, images)

    def _gather(self, maps: torch.Tensor, images: list[str]) -> tuple[F32, I32]:
        import torch

        batch, channels, height, width = maps.shape
        picks = [
            draw_positions(self.seed, image, height * width, self.points.k) for image in images
        ]
        index = torch.from_numpy(np.stack(picks)).to(maps.device, torch.long)  # (B, K)
        flat = maps.reshape(batch, channels, height * width)
        gathered = flat.gather(2, index[:, None, :].expand(-1, channels, -1))  # (B, C, K)
        vectors = gathered.permute(0, 2, 1).reshape(-1, channels).cpu().numpy()
        return vectors, np.concatenate(picks).astype(np.int32)


@dataclass
class PointStore:
    """Every point of the run in one array allocated once: image ``i``'s rows are
    ``i * per_image`` onwards (an image that failed leaves its rows unused).

    Attributes:
        images: How many images there are.
        per_image: Rows per image (1 for pooled points, K for spatial ones; fewer when the
            map has fewer positions).
        vectors: ``(images * per_image, C)`` float32, allocated on the first batch.
        positions: Each row's flat map position (-1 for a pooled vector).
        done: Which images' rows are filled.
    """

    images: int
    per_image: int
    vectors: F32 | None = None
    positions: I32 | None = None
    done: npt.NDArray[np.bool_] | None = None

    def put(self, index: int, vectors: F32, positions: I32) -> None:
        """Image ``index``'s rows."""
        rows = vectors.shape[0]
        if self.vectors is None:
            self.per_image = rows
            self.vectors = np.zeros((self.images * rows, vectors.shape[1]), np.float32)
            self.positions = np.full(self.images * rows, -1, np.int32)
            self.done = np.zeros(self.images, bool)
        assert self.positions is not None and self.done is not None
        if rows != self.per_image or vectors.shape[1] != self.vectors.shape[1]:
            raise UsageError(
                f"an image gave {rows} points of {vectors.shape[1]} channels where the first "
                f"gave {self.per_image} of {self.vectors.shape[1]}; pass --input-size H,W so "
                "every image is cropped to one size"
            )
        start = index * rows
        self.vectors[start : start + rows] = vectors
        self.positions[start : start + rows] = positions
        self.done[index] = True

    def rows_of(self, index: int) -> tuple[F32, I32]:
        """Image ``index``'s rows (for a resume's part)."""
        assert self.vectors is not None and self.positions is not None
        start = index * self.per_image
        end = start + self.per_image
        return self.vectors[start:end], self.positions[start:end]

    def kept(self) -> tuple[F32, I32, I32]:
        """The filled rows: vectors, positions, and each row's image index (a copy only when
        some image failed)."""
        if self.vectors is None or self.done is None or self.positions is None:
            return np.zeros((0, 0), np.float32), np.zeros(0, np.int32), np.zeros(0, np.int32)
        image = np.repeat(np.arange(self.images, dtype=np.int32), self.per_image)
        rows = np.repeat(self.done, self.per_image)
        if rows.all():
            return self.vectors, self.positions, image
        return self.vectors[rows], self.positions[rows], image[rows]


def split_rows(vectors: F32, positions: I32, counts: list[int]) -> list[tuple[F32, I32]]:
    """Rows of a batch cut per image, ``counts[i]`` rows each."""
    bounds = np.cumsum([0, *counts])
    return [
        (vectors[bounds[i] : bounds[i + 1]], positions[bounds[i] : bounds[i + 1]])
        for i in range(len(counts))
    ]


def per_image_rows(points: Points, plan: LayerPlan) -> int:
    """How many rows one image gives."""
    return 1 if points.kind == "pooled" else min(points.k, plan.height * plan.width)


def describe_points(points: Points, plan: LayerPlan) -> dict[str, Any]:
    """JSON-ready: what a point is."""
    rows = per_image_rows(points, plan)
    what = (
        "the spatial mean of the layer's maps, one vector per image"
        if points.kind == "pooled"
        else f"{rows} map position(s) per image, drawn at random (the seed and the image's name)"
    )
    return {"kind": points.kind, "per_image": rows, "what": what}
