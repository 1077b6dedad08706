"""The transform from a PIL image to a model input: resize, centre-crop, scale, normalize.

It does what torchvision's ``ImageClassification`` presets do (resize the shorter side, centre
crop) and what its ``SemanticSegmentation`` presets do (resize the shorter side, no crop), but
as a small frozen dataclass that keeps the geometry (so overlays can be aligned with the input,
and an image the model barely sees can be named) and that can follow a different input size or
greyscale input.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from PIL import Image as PILImage

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_ASPECT",
    "Fit",
    "Preprocessing",
    "PreprocessingWarning",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Without a crop, the longest image side kept is this many times the shorter one.
MAX_ASPECT = 4.0
#: A note when the model sees less than this share of an image (a 16:9 photo through a
#: 256 -> 224 crop keeps 43%; a 3:1 panorama 26%).
_SEEN_NOTE_BELOW = 0.3
#: A note when an image is enlarged this many times or more.
_UPSAMPLED_NOTE_FROM = 8.0


class PreprocessingWarning(UserWarning):
    """A model's inputs are prepared with defaults rather than what it was trained with (a
    Hugging Face folder without its image processor); the CLI prints it as a warning line."""


@dataclass(frozen=True)
class Fit:
    """What a model sees of one image, worked out from the sizes alone.

    Attributes:
        size: The image's ``(width, height)``.
        resized: ``(width, height)`` after resizing the whole image (or, when ``kept`` is
            set, the part of it that is kept).
        crop: ``(width, height)`` of the centre crop of the resized image; None without one.
        seen: The share of the image's area the model sees, 0 to 1.
        kept: Without a crop, ``(width, height)`` of the image's centre that is kept when
            it is longer than ``MAX_ASPECT``; None when all of it is.
    """

    size: tuple[int, int]
    resized: tuple[int, int]
    crop: tuple[int, int] | None
    seen: float
    kept: tuple[float, float] | None = None

    @property
    def upsampled(self) -> float:
        """How many times the image is enlarged (below 1: shrunk)."""
        width, height = self.kept or self.size
        return min(self.resized) / max(min(width, height), 1e-9)

    def note(self, image: object) -> str | None:
        """The warning for this image, or None when the model sees it well."""
        width, height = self.size
        parts = []
        if self.upsampled >= _UPSAMPLED_NOTE_FROM:
            structure = (
                "the maps show no structure"
                if width * height == 1
                else "its maps show interpolation more than image detail"
            )
            parts.append(f"upsampled {_times(self.upsampled)}x; {structure}")
        if self.seen < _SEEN_NOTE_BELOW:
            rw, rh = self.resized
            if self.crop is not None:
                cw, ch = self.crop
                saw = f"a {cw}x{ch} centre crop of a {rw}x{rh} resize"
            else:
                kw, kh = (round(v) for v in self.kept or self.size)
                saw = f"its central {kw}x{kh}, resized to {rw}x{rh}"
            parts.append(f"the model saw {saw}, i.e. {_percent(self.seen)} of the image")
        if not parts:
            return None
        return f"image {image} is {width}x{height}: {'; '.join(parts)}"


def _times(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")


def _percent(share: float) -> str:
    value = share * 100
    if value >= 10:
        return f"{value:.0f}%"
    if value >= 1:
        return f"{value:.1f}%".replace(".0%", "%")
    return f"{value:.2g}%"


def _resized(width: int, height: int, size: int) -> tuple[int, int]:
    """``(width, height)`` after torchvision resizes the shorter side to ``size``."""
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def _central_box(width: int, height: int) -> tuple[float, float, float, float] | None:
    """The centre of an image longer than ``MAX_ASPECT`` to 1, as a Pillow box; None for
    an image that is kept whole."""
    short, long = min(width, height), max(width, height)
    if long <= MAX_ASPECT * short:
        return None
    margin = (long - MAX_ASPECT * short) / 2
    if width > height:
        return (margin, 0.0, width - margin, float(height))
    return (0.0, margin, float(width), height - margin)


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side, centre-crop, scale to [0, 1], normalize: what torchvision's
    ``ImageClassification`` presets do, with the geometry kept so overlays can be aligned.
    Without ``crop``, what its ``SemanticSegmentation`` presets do: resize only.

    Picklable, so DataLoader workers can run it.

    Attributes:
        resize_size: The shorter side after resizing.
        crop_size: ``(height, width)`` of the centre crop: the model's input size. Without
            ``crop``, only the nominal size (``resize_size`` square), for layer geometry.
        mean: Per-channel mean for normalization.
        std: Per-channel standard deviation.
        channels: 3 (RGB) or 1 (greyscale).
        interpolation: ``bilinear`` or ``bicubic`` (antialiased).
        crop: Centre-crop to ``crop_size``. False for segmentation presets: the input keeps
            the image's aspect ratio (up to ``MAX_ASPECT``; the centre of a longer image is
            kept), so inputs of different shapes reach the model.
    """

    resize_size: int
    crop_size: tuple[int, int]
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    channels: int = 3
    interpolation: str = "bilinear"
    crop: bool = True
    origin: str = field(default="", compare=False)
    """Where these values came from (the weights, a pretrained config, defaults), for the
    manifest."""
    squash: bool = False
    """Resize the whole image without keeping its aspect ratio: to ``crop_size`` (Hugging
    Face's ViT image processors), or to ``resize_size`` square and then centre-crop
    ``crop_size`` (timm's ``squash`` crop mode)."""

    @property
    def input_axes(self) -> tuple[int, ...]:
        """The sizes of one input between its channels and its height: none for an image
        (a clip's frames, a pair's two pictures)."""
        return ()

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """An RGB PIL image -> a normalized ``(channels, height, width)`` float tensor."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        if self.channels == 1:
            image = image.convert("L")
        if self.squash:
            mode = InterpolationMode(self.interpolation)
            size = list(self._squashed())
            image = F.resize(image, size, interpolation=mode, antialias=True)
            if size != list(self.crop_size):
                image = F.center_crop(image, list(self.crop_size))
            tensor = F.convert_image_dtype(F.pil_to_tensor(image))
            squashed: torch.Tensor = F.normalize(tensor, mean=list(self.mean), std=list(self.std))
            return squashed
        cropped = self._resize_crop_extreme(image) if self.crop else self._resize_long(image)
        if cropped is not None:
            image = cropped
        else:
            mode = InterpolationMode(self.interpolation)
            image = F.resize(image, [self.resize_size], interpolation=mode, antialias=True)
            if self.crop:
                image = F.center_crop(image, list(self.crop_size))
        tensor = F.convert_image_dtype(F.pil_to_tensor(image))
        normalized: torch.Tensor = F.normalize(tensor, mean=list(self.mean), std=list(self.std))
        return normalized

    def fit(self, size: tuple[int, int]) -> Fit:
        """What the model sees of an image of ``size`` (width, height): from the sizes alone."""
        width, height = size
        if self.squash:
            crop_h, crop_w = self.crop_size
            new_h, new_w = self._squashed()
            if (new_h, new_w) == (crop_h, crop_w):
                return Fit(size, (crop_w, crop_h), None, 1.0)
            seen = min(crop_w, new_w) * min(crop_h, new_h) / (new_w * new_h)
            return Fit(size, (new_w, new_h), (crop_w, crop_h), seen)
        new_w, new_h = _resized(width, height, self.resize_size)
        if self.crop:
            crop_h, crop_w = self.crop_size
            seen_w, seen_h = min(crop_w, new_w), min(crop_h, new_h)
            return Fit(size, (new_w, new_h), (crop_w, crop_h), seen_w * seen_h / (new_w * new_h))
        box = _central_box(width, height)
        if box is None:
            return Fit(size, (new_w, new_h), None, 1.0)
        kept_w, kept_h = box[2] - box[0], box[3] - box[1]
        resized = _resized(round(kept_w), round(kept_h), self.resize_size)
        return Fit(size, resized, None, kept_w * kept_h / (width * height), (kept_w, kept_h))

    def fit_note(self, size: tuple[int, int], image: object) -> str | None:
        """A warning when the model sees little of an image, or little but interpolation.

        ``image x.png is 900x300: the model saw a 224x224 centre crop of a 768x256 resize,
        i.e. 26% of the image``; ``image y.png is 1x1: upsampled 256x; the maps show no
        structure``. None for ordinary photos, 16:9 ones included.

        Args:
            size: The image's ``(width, height)`` as decoded.
            image: How to name the image (its path).
        """
        return self.fit(size).note(image)

    def _resize_long(self, image: Image.Image) -> Image.Image | None:
        """Resize without a crop, keeping only the centre of an image longer than
        ``MAX_ASPECT`` times its width: a 10000 x 10 strip would otherwise be resized to
        520000 x 520. Ordinary shapes return None and take torchvision's own path."""
        width, height = image.size
        box = _central_box(width, height)
        if box is None:
            return None
        kept_w, kept_h = box[2] - box[0], box[3] - box[1]
        target = _resized(max(1, round(kept_w)), max(1, round(kept_h)), self.resize_size)
        return image.resize(target, self._resample(), box=box)

    def _resample(self) -> int:

        return int(
            PILImage.Resampling.BICUBIC
            if self.interpolation == "bicubic"
            else PILImage.Resampling.BILINEAR
        )

    def _resize_crop_extreme(self, image: Image.Image) -> Image.Image | None:
        """Resize and centre-crop in one step for an extreme aspect ratio.

        Resizing the shorter side of a 10000 x 1 image to 256 would first build a
        2,560,000 x 256 picture (seconds and gigabytes) only to keep its centre. Pillow can
        resample just the source region the crop keeps (``box``), with the same scale and the
        same sample positions, so the result equals resize-then-crop. Ordinary shapes return
        None and take torchvision's own path.
        """
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
        return image.resize((crop_w, crop_h), self._resample(), box=box)

    @classmethod
    def fitted(
        cls,
        *,
        resize: int = 256,
        crop: int = 224,
        mean: tuple[float, ...] = IMAGENET_MEAN,
        std: tuple[float, ...] = IMAGENET_STD,
        interpolation: str = "bilinear",
        crops: bool = True,
        input_size: tuple[int, int] | None = None,
        in_chans: int = 3,
        squash: bool = False,
    ) -> Preprocessing:
        """A model's own preprocessing (by default ImageNet's standard one), adapted to
        another input size or to greyscale input.

        Args:
            resize: The shorter side after resizing.
            crop: The side of the square centre crop.
            mean: Per-channel mean of the model's RGB input.
            std: Per-channel standard deviation of the model's RGB input.
            interpolation: ``bilinear`` or ``bicubic``.
            crops: False for a model that takes the resized image whole (segmentation).
            input_size: ``(height, width)`` asked for instead of the crop; the
                resize-to-crop ratio is kept (256/224 for ImageNet presets).
            in_chans: 1 for greyscale input: mean and std become their averages.
            squash: Resize the whole image to the crop size, aspect ratio not kept.

        Raises:
            UsageError: If ``input_size`` is not positive.
        """
        size = (crop, crop)
        if input_size is not None:
            if min(input_size) < 1:
                raise UsageError(f"--input-size must be positive, not {input_size}")
            resize = max(1, round(max(input_size) * resize / crop))
            size = input_size
            crops = True  # a fixed input size is what was asked for
        if in_chans == 1:
            mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
        return cls(
            resize, size, tuple(mean), tuple(std), in_chans, interpolation, crops, squash=squash
        )

    def _squashed(self) -> tuple[int, int]:
        """``(height, width)`` the whole image is resized to with ``squash``: the crop size
        scaled by ``resize_size`` over its longer side (timm's ``size / crop_pct``)."""
        crop_h, crop_w = self.crop_size
        longer = max(crop_h, crop_w)
        return (
            max(1, round(crop_h * self.resize_size / longer)),
            max(1, round(crop_w * self.resize_size / longer)),
        )

    def described(self, origin: str) -> Preprocessing:
        """The same preprocessing, saying where its values came from."""
        return replace(self, origin=origin)

    def record(self) -> dict[str, object]:
        """The preprocessing actually used, as the manifest records it."""
        return {
            "resize": list(self._squashed()) if self.squash else self.resize_size,
            "crop": None
            if not self.crop or (self.squash and self._squashed() == self.crop_size)
            else list(self.crop_size),
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "from": self.origin or None,
        }
