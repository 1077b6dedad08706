"""The transform from a PIL image to a model input: resize, centre-crop, scale, normalize.

It does what torchvision's ``ImageClassification`` presets do, but as a small frozen dataclass
that keeps the geometry (so overlays can be aligned with the input) and that can follow a
different input size or greyscale input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from torchvision.models import WeightsEnum

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "Preprocessing"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side, centre-crop, scale to [0, 1], normalize: what torchvision's
    ``ImageClassification`` presets do, with the geometry kept so overlays can be aligned.

    Picklable, so DataLoader workers can run it.

    Attributes:
        resize_size: The shorter side after resizing.
        crop_size: ``(height, width)`` of the centre crop: the model's input size.
        mean: Per-channel mean for normalization.
        std: Per-channel standard deviation.
        channels: 3 (RGB) or 1 (greyscale).
        interpolation: ``bilinear`` or ``bicubic`` (antialiased).
    """

    resize_size: int
    crop_size: tuple[int, int]
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    channels: int = 3
    interpolation: str = "bilinear"

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """An RGB PIL image -> a normalized ``(channels, height, width)`` float tensor."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        if self.channels == 1:
            image = image.convert("L")
        cropped = self._resize_crop_extreme(image)
        if cropped is not None:
            image = cropped
        else:
            mode = InterpolationMode(self.interpolation)
            image = F.resize(image, [self.resize_size], interpolation=mode, antialias=True)
            image = F.center_crop(image, list(self.crop_size))
        tensor = F.convert_image_dtype(F.pil_to_tensor(image))
        normalized: torch.Tensor = F.normalize(tensor, mean=list(self.mean), std=list(self.std))
        return normalized

    def _resize_crop_extreme(self, image: Image.Image) -> Image.Image | None:
        """Resize and centre-crop in one step for an extreme aspect ratio.

        Resizing the shorter side of a 10000 x 1 image to 256 would first build a
        2,560,000 x 256 picture (seconds and gigabytes) only to keep its centre. Pillow can
        resample just the source region the crop keeps (``box``), with the same scale and the
        same sample positions, so the result equals resize-then-crop. Ordinary shapes return
        None and take torchvision's own path.
        """
        from PIL import Image as PILImage

        width, height = image.size
        size = self.resize_size
        if width <= height:
            new_w, new_h = size, int(size * height / width)
        else:
            new_w, new_h = int(size * width / height), size
        crop_h, crop_w = self.crop_size
        if max(new_w, new_h) <= 4 * max(crop_w, crop_h) or new_w < crop_w or new_h < crop_h:
            return None
        left = int(round((new_w - crop_w) / 2.0))  # where torchvision's center_crop starts
        top = int(round((new_h - crop_h) / 2.0))
        sx, sy = width / new_w, height / new_h
        box = (left * sx, top * sy, (left + crop_w) * sx, (top + crop_h) * sy)
        resample = (
            PILImage.Resampling.BICUBIC
            if self.interpolation == "bicubic"
            else PILImage.Resampling.BILINEAR
        )
        return image.resize((crop_w, crop_h), resample, box=box)

    @classmethod
    def for_weights(
        cls,
        weights: WeightsEnum | None,
        *,
        input_size: tuple[int, int] | None = None,
        in_chans: int = 3,
    ) -> Preprocessing:
        """The preprocessing of these weights (ImageNet's standard one without weights),
        adapted to another input size or to greyscale input."""
        transform: Any = weights.transforms() if weights is not None else None
        resize = _first_int(getattr(transform, "resize_size", None), 256)
        crop = _first_int(getattr(transform, "crop_size", None), resize if transform else 224)
        mean = tuple(float(v) for v in getattr(transform, "mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in getattr(transform, "std", IMAGENET_STD))
        interpolation = getattr(getattr(transform, "interpolation", None), "value", "bilinear")
        size = (crop, crop)
        if input_size is not None:
            if min(input_size) < 1:
                raise UsageError(f"--input-size must be positive, not {input_size}")
            # Keep the weights' resize-to-crop ratio (256/224 for ImageNet presets).
            resize = max(1, round(max(input_size) * resize / crop))
            size = input_size
        if in_chans == 1:
            mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
        return cls(resize, size, mean, std, in_chans, interpolation)


def _first_int(value: object, default: int) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], int):
        return int(value[0])
    return default
