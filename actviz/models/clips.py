"""The preprocessing of models that take more than one picture per input: a video model's clip
``(C, T, H, W)`` and an optical-flow model's pair of images ``(C, 2, H, W)``.

Both are :class:`~actviz.models.Preprocessing` (so every command keeps its geometry, mean and
std, and the manifest its record) that read their input from a path themselves
(:meth:`read_file`): the loader hands them the file, the folder or the video.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.io.images import load_rgb
from actviz.io.video import read_frames, read_pair
from actviz.models.preprocessing import Preprocessing

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = [
    "ClipPreprocessing",
    "PairPreprocessing",
    "clip_preprocessing",
    "pair_preprocessing",
]

#: Frames of a clip when the weights do not say (torchvision's video recipes use 16).
DEFAULT_FRAMES = 16
#: Frames per second a clip is sampled at when the weights do not say.
DEFAULT_FPS = 15.0


@dataclass(frozen=True)
class ClipPreprocessing(Preprocessing):
    """What torchvision's ``VideoClassification`` presets do, from a file to a clip: sample
    ``frames`` frames at ``fps``, resize each one as it is decoded (to ``resize_hw``, or its
    shorter side to ``resize_size``; bilinear without antialiasing, as the presets), centre
    crop ``crop_size``, scale to [0, 1], normalize, and lay out ``(C, T, H, W)``."""

    frames: int = DEFAULT_FRAMES
    fps: float = DEFAULT_FPS
    resize_hw: tuple[int, int] | None = None

    @property
    def input_axes(self) -> tuple[int, ...]:
        """A clip's frames: ``(C, T, H, W)``."""
        return (self.frames,)

    def read_file(self, path: Path) -> tuple[torch.Tensor, tuple[int, int]]:
        """The clip of the video, animation or frame folder at ``path``, and the size
        ``(width, height)`` of its frames."""
        import torch

        pictures = read_frames(path, self.frames, self.fps)
        size = pictures[0].size
        return self.normalize(torch.stack([self.resized(p) for p in pictures])), size

    def resized(self, frame: Image.Image) -> torch.Tensor:
        """One frame resized and cropped, uint8 ``(C, H, W)``."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        tensor = F.pil_to_tensor(frame.convert("RGB"))
        size = list(self.resize_hw) if self.resize_hw is not None else [self.resize_size]
        # antialias=False, as torchvision's video presets (which the weights were made with).
        resized = F.resize(tensor, size, interpolation=InterpolationMode.BILINEAR, antialias=False)
        cropped: torch.Tensor = F.center_crop(resized, list(self.crop_size))
        return cropped

    def normalize(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 ``(T, C, H, W)`` frames -> the normalized ``(C, T, H, W)`` model input."""
        import torch
        from torchvision.transforms import functional as F

        scaled = F.convert_image_dtype(frames, torch.float)
        normal: torch.Tensor = F.normalize(scaled, mean=list(self.mean), std=list(self.std))
        return normal.permute(1, 0, 2, 3).contiguous()

    def with_frames(self, frames: int | None) -> ClipPreprocessing:
        """The same preprocessing with another clip length (None keeps it)."""
        if frames is None:
            return self
        if frames < 1:
            raise UsageError(f"--frames must be at least 1, not {frames}")
        return replace(self, frames=frames)

    def record(self) -> dict[str, object]:
        """The preprocessing actually used, as the manifest records it."""
        return {
            **super().record(),
            "resize": list(self.resize_hw) if self.resize_hw else self.resize_size,
            "frames": self.frames,
            "fps": self.fps,
            "antialias": False,
        }


def clip_preprocessing(
    weights: Any,
    *,
    input_size: tuple[int, int] | None = None,
    base: Preprocessing | None = None,
) -> ClipPreprocessing:
    """The clip preprocessing of torchvision video weights (their ``transforms()`` and the
    clip length of their recipe), or of ``base`` (a user's own video model: its image
    preprocessing, 16 frames at 15 fps), at ``input_size`` when given."""
    transform = weights.transforms() if weights is not None else None
    if transform is not None:
        resize = tuple(int(v) for v in transform.resize_size)
        crop = (int(transform.crop_size[0]), int(transform.crop_size[1]))
        mean, std = tuple(map(float, transform.mean)), tuple(map(float, transform.std))
        frames, fps = _recipe(weights)
        origin = f"transforms of the torchvision weights {weights}"
    else:
        image = base or Preprocessing.fitted()
        resize, crop = (image.resize_size,), image.crop_size
        mean, std = image.mean, image.std
        frames, fps = DEFAULT_FRAMES, DEFAULT_FPS
        origin = f"{image.origin or 'ImageNet defaults'}; {frames} frames at {fps:g} fps"
    if input_size is not None:
        if min(input_size) < 1:
            raise UsageError(f"--input-size must be positive, not {input_size}")
        scale = max(input_size) / max(crop)
        resize = tuple(max(1, round(v * scale)) for v in resize)
        crop = (int(input_size[0]), int(input_size[1]))
    hw = (resize[0], resize[1]) if len(resize) == 2 else None
    return ClipPreprocessing(
        resize_size=resize[0],
        crop_size=crop,
        mean=mean,
        std=std,
        origin=origin,
        frames=frames,
        fps=fps,
        resize_hw=hw,
    )


def _recipe(weights: Any) -> tuple[int, float]:
    """Clip length and frame rate the weights were evaluated with (their docs say
    ``frame_rate=15`` and ``clip_len=16``), at least ``min_temporal_size``."""

    meta: Mapping[str, Any] = getattr(weights, "meta", {})
    docs = str(meta.get("_docs", ""))
    length = re.search(r"clip_len=(\d+)", docs)
    rate = re.search(r"frame_rate=([\d.]+)", docs)
    frames = int(length.group(1)) if length else DEFAULT_FRAMES
    frames = max(frames, int(meta.get("min_temporal_size", 1) or 1))
    fps = float(rate.group(1)) if rate else DEFAULT_FPS
    # S3D's recipe takes 128-frame clips; 16 (its minimum is 14) keeps a run light.
    return min(frames, 32), fps


@dataclass(frozen=True)
class PairPreprocessing(Preprocessing):
    """An optical-flow model's input: two pictures (two image files, or two consecutive
    frames of a video), scaled to [-1, 1] as torchvision's ``OpticalFlow`` preset does, at
    one size that is a multiple of 8 (RAFT's requirement): the first picture's own size
    rounded down to it (at least ``min_side``), or ``fixed`` when given.

    ``partners`` maps the path of each pair's first picture to its second; a path without
    a partner is a video, whose two middle frames are the pair."""

    partners: Mapping[str, str] = field(default_factory=dict, compare=False)
    fixed: tuple[int, int] | None = None
    min_side: int = 128

    @property
    def input_axes(self) -> tuple[int, ...]:
        """A pair's two pictures: ``(C, 2, H, W)``."""
        return (2,)

    def read_file(self, path: Path) -> tuple[torch.Tensor, tuple[int, int]]:
        """The pair starting at ``path``, ``(C, 2, H, W)``, and the first picture's size."""
        import torch

        partner = self.partners.get(str(path))
        if partner is not None:
            first, second = load_rgb(path), load_rgb(Path(partner))
        else:
            first, second = read_pair(path)
        size = self.pair_size(first.size)
        tensors = [self._scaled(picture, size) for picture in (first, second)]
        return torch.stack(tensors, dim=1), first.size

    def pair_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """``(height, width)`` the pair is resized to, from the first picture's
        ``(width, height)``: multiples of 8, at least ``min_side``."""
        if self.fixed is not None:
            height, width = self.fixed
        else:
            width, height = size
            short = min(width, height)
            if short < self.min_side:
                width, height = (round(v * self.min_side / short) for v in (width, height))
        return max(8, height // 8 * 8), max(8, width // 8 * 8)

    def _scaled(self, picture: Image.Image, size: tuple[int, int]) -> torch.Tensor:
        from torchvision.transforms import functional as F

        tensor = F.pil_to_tensor(picture.convert("RGB"))
        if tuple(tensor.shape[1:]) != size:
            tensor = F.resize(tensor, list(size), antialias=True)
        scaled = F.convert_image_dtype(tensor)
        normal: torch.Tensor = F.normalize(scaled, mean=list(self.mean), std=list(self.std))
        return normal

    def with_partners(self, partners: Mapping[str, str]) -> PairPreprocessing:
        """The same preprocessing for these pairs."""
        return replace(self, partners=dict(partners))

    def record(self) -> dict[str, object]:
        """The preprocessing actually used, as the manifest records it."""
        return {
            "resize": list(self.fixed) if self.fixed else "own size, rounded down to 8",
            "crop": None,
            "mean": list(self.mean),
            "std": list(self.std),
            "pair": True,
            "multiple_of": 8,
            "min_side": self.min_side,
            "from": self.origin or None,
        }


def pair_preprocessing(input_size: tuple[int, int] | None = None) -> PairPreprocessing:
    """torchvision's ``OpticalFlow`` preset (to [0, 1], then normalized to [-1, 1]), at
    ``input_size`` (rounded down to multiples of 8) or at each pair's own size."""
    if input_size is not None and min(input_size) < 8:
        raise UsageError(f"--input-size must be at least 8 x 8 for a flow model, not {input_size}")
    fixed = (input_size[0] // 8 * 8, input_size[1] // 8 * 8) if input_size else None
    return PairPreprocessing(
        resize_size=fixed[0] if fixed else 128,
        crop_size=fixed or (128, 128),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        crop=False,
        origin="torchvision's OpticalFlow preset: [0, 1] normalized to [-1, 1]",
        fixed=fixed,
    )
