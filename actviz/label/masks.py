"""``--masks``: pixel-level concepts scored by IoU, as Network Dissection does.

A mask is a picture of its image's size whose non-zero pixels hold the concept, found at
``MASKS/<concept>/<image path without extension>.<png|jpg|...>``; an image without a mask of a
concept does not hold it. Masks go through the model's own geometry (resize, centre crop) like
their images, then are reduced to the IoU grid (the input's size divided by a whole factor, at
most 112 pixels a side, Network Dissection's resolution) and read as held where at least half
of a cell holds the concept.

A unit marks a pixel where its map, upsampled bilinearly to the grid, reaches its threshold:
the value at its top ``quantile`` of all its map values over the folder. The threshold is
exact: the first pass keeps, per unit, only the values that can still be among its top ``k``
(those at or above the running k-th largest), which are few beyond the first batches; the
second pass counts, per unit and concept, the marked pixels, the concept's pixels and their
intersection. IoU is the intersection over the union, summed over all images.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from actviz.errors import UsageError
from actviz.label.concepts import SHOWN, Concepts, ImageKeys

if TYPE_CHECKING:
    import torch

    from actviz.models import Preprocessing

__all__ = [
    "IOU_SIDE",
    "MaskSet",
    "TopValues",
    "iou_grid",
    "load_mask",
    "marked",
    "quantile_count",
    "read_masks",
    "upright_size",
]

#: The IoU grid's longer side, at most (Network Dissection scores at 112 x 112).
IOU_SIDE = 112
_SUFFIXES = {".png", ".bmp", ".gif", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"}


def iou_grid(input_size: tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` of the IoU grid: the input's size divided by the smallest whole
    factor that brings its longer side to at most :data:`IOU_SIDE`."""
    height, width = input_size
    factor = max(1, math.ceil(max(height, width) / IOU_SIDE))
    return max(1, height // factor), max(1, width // factor)


@dataclass(frozen=True, eq=False)
class MaskSet:
    """The masks found: per image and concept, its file (or None).

    Attributes:
        folder: The masks' folder.
        files: ``{(image index, concept index): file}``.
        concepts: The concepts (with ``labels``: the images whose mask holds any pixel).
    """

    folder: Path
    files: dict[tuple[int, int], Path]
    concepts: Concepts

    def batch(
        self, indices: Sequence[int], preprocess: Preprocessing, grid: tuple[int, int]
    ) -> npt.NDArray[np.bool_]:
        """``(B, K, H, W)`` the masks of the images ``indices`` on the grid (False where an
        image has no mask of a concept)."""
        k = len(self.concepts.names)
        out = np.zeros((len(indices), k, *grid), dtype=bool)
        for row, index in enumerate(indices):
            for c in range(k):
                path = self.files.get((index, c))
                if path is not None:
                    out[row, c] = load_mask(path, preprocess, grid)
        return out


def upright_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of a picture as actviz decodes it: its EXIF orientation applied,
    read from the header only."""

    with Image.open(path) as im:
        width, height = im.size
        orientation = im.getexif().get(0x0112, 1)
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def read_masks(folder: Path, rels: Sequence[PurePosixPath], paths: Sequence[Path]) -> MaskSet:
    """Find every concept's masks in ``folder``, check each one's size against its image's,
    and read which images hold each concept.

    Raises:
        UsageError: For a missing folder, one without concept subfolders or masks of the
            folder's images, an unreadable mask, or a mask of another size than its image.
    """
    if not folder.is_dir():
        raise UsageError(
            f"--masks {folder}: no such folder; give a folder of MASKS/<concept>/<image>.png"
        )
    concept_dirs = sorted(p for p in folder.iterdir() if p.is_dir())
    if not concept_dirs:
        raise UsageError(
            f"--masks {folder} has no concept subfolders; put each concept's masks in "
            "MASKS/<concept>/<image path>.png"
        )
    keys = ImageKeys(rels, paths)
    files: dict[tuple[int, int], Path] = {}
    unmatched: list[str] = []
    for c, concept_dir in enumerate(concept_dirs):
        for mask in sorted(concept_dir.rglob("*")):
            if not mask.is_file() or mask.suffix.lower() not in _SUFFIXES:
                continue
            rel = mask.relative_to(concept_dir).with_suffix("").as_posix()
            index = keys.find(rel)
            if index is None:
                unmatched.append(f"{concept_dir.name}/{mask.relative_to(concept_dir).as_posix()}")
                continue
            files[(index, c)] = mask
    if not files:
        shown = unmatched[0] if unmatched else "none"
        raise UsageError(
            f"--masks {folder} holds no mask of an image of the folder (first: {shown}); name "
            "each MASKS/<concept>/<image path relative to the folder>.png"
        )
    labels = np.zeros((len(rels), len(concept_dirs)), dtype=bool)
    for (index, c), mask in files.items():
        labels[index, c] = _check_and_read(mask, paths[index])
    concepts = Concepts(
        source="masks",
        names=[p.name for p in concept_dirs],
        labels=labels,
        file=str(folder),
        unmatched=unmatched[:SHOWN],
        unmatched_count=len(unmatched),
    )
    return MaskSet(folder=folder, files=files, concepts=concepts)


def _check_and_read(mask: Path, image: Path) -> bool:
    """Whether ``mask`` holds any pixel, after checking that it has its image's size."""

    try:
        with Image.open(mask) as im:
            size = im.size
            held = bool(np.asarray(im.convert("L")).any())
    except (OSError, UnidentifiedImageError) as exc:
        raise UsageError(f"mask {mask} cannot be read: {exc}") from None
    try:
        expected = upright_size(image)
    except (OSError, UnidentifiedImageError):
        return held  # the image's own read names the problem when it runs
    if size != expected:
        raise UsageError(
            f"mask {mask} is {size[0]}x{size[1]} but its image {image} is "
            f"{expected[0]}x{expected[1]}; a mask must have its image's size"
        )
    return held


def load_mask(path: Path, preprocess: Preprocessing, grid: tuple[int, int]) -> npt.NDArray[Any]:
    """A mask as the model sees its image (resized and cropped like it), on the IoU grid:
    a cell holds the concept where at least half of it does."""
    import torch.nn.functional as F

    geometry = dataclasses.replace(preprocess, mean=(0.0,), std=(1.0,), channels=1)
    with Image.open(path) as im:
        binary = im.convert("L").point(lambda v: 255 if v else 0)
        tensor = geometry(binary.convert("RGB"))  # (1, H, W) in 0..1
    reduced = F.interpolate(tensor[None].float(), size=grid, mode="area")[0, 0]
    held: npt.NDArray[Any] = (reduced >= 0.5).numpy()
    return held


def marked(maps: torch.Tensor, thresholds: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``(B, U, H, W)`` bool: where each unit's map, upsampled bilinearly to ``grid``,
    reaches its threshold; a threshold of 0 or below marks only values above it (a unit active
    on fewer positions than its quantile marks where it is active, not everywhere)."""
    import torch.nn.functional as F

    up = F.interpolate(maps, size=grid, mode="bilinear", align_corners=False)
    t = thresholds.to(up.device, up.dtype)[None, :, None, None]
    return (up >= t) & ((t > 0) | (up > t))


@dataclass
class TopValues:
    """Each unit's ``k`` largest map values seen so far, exact, for the quantile threshold.

    Attributes:
        values: ``(U, k)`` float32, ``-inf`` where fewer were seen.
    """

    values: npt.NDArray[np.float32]
    merged: int = field(default=0)

    @classmethod
    def empty(cls, units: int, k: int) -> TopValues:
        return cls(np.full((units, max(1, k)), -np.inf, dtype=np.float32))

    @property
    def floor(self) -> npt.NDArray[np.float32]:
        """``(U,)`` the smallest kept value: a new value below it cannot enter."""
        floor: npt.NDArray[np.float32] = self.values.min(axis=1)
        return floor

    def candidates(self, maps: torch.Tensor) -> tuple[npt.NDArray[np.int32], npt.NDArray[Any]]:
        """The values of a batch's maps ``(B, U, H, W)`` that can enter, as ``(unit, value)``
        arrays: selected where the maps are (the device), copied small."""
        import torch

        units = maps.shape[1]
        flat = maps.transpose(0, 1).reshape(units, -1)
        floor = torch.as_tensor(self.floor, device=flat.device)
        keep = flat > floor[:, None]  # a value equal to the floor changes no kept value
        rows, _ = keep.nonzero(as_tuple=True)
        return (
            rows.to(torch.int32).cpu().numpy(),
            flat[keep].to(torch.float32).cpu().numpy(),
        )

    def merge(self, units: npt.NDArray[np.int32], values: npt.NDArray[Any]) -> None:
        """Keep the ``k`` largest of what was kept and ``values`` (of ``units``)."""
        if units.size == 0:
            return
        count, k = self.values.shape
        order = np.argsort(units, kind="stable")
        units, values = units[order], values[order]
        per = np.bincount(units, minlength=count)
        starts = np.concatenate(([0], np.cumsum(per)[:-1]))
        width = int(per.max())
        padded = np.full((count, width), -np.inf, dtype=np.float32)
        padded[units, np.arange(units.size) - starts[units]] = values
        joined = np.concatenate([self.values, padded], axis=1)
        if joined.shape[1] > k:
            joined = -np.partition(-joined, k - 1, axis=1)[:, :k]
        self.values = np.ascontiguousarray(joined, dtype=np.float32)
        self.merged += int(values.size)

    def thresholds(self, k: int) -> npt.NDArray[np.float32]:
        """``(U,)`` each unit's ``k``-th largest value (``k`` at most the kept count)."""
        k = max(1, min(k, self.values.shape[1]))
        ranked = -np.sort(-self.values, axis=1)
        out: npt.NDArray[np.float32] = ranked[:, k - 1]
        return out


def quantile_count(quantile: float, images: int, cells: int) -> int:
    """How many of a unit's map values over ``images`` images of ``cells`` cells are in its
    top ``quantile``."""
    return max(1, math.ceil(quantile * images * cells))
