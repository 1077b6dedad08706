"""A Hugging Face model's inputs, prepared by its own image processor.

The folder's ``AutoImageProcessor``, as transformers gives it by default (the one
``pipeline()`` runs: in transformers 5 its torchvision backend where the model has one), is
called on each PIL image with ``return_tensors="pt"``, so the pixel values are the processor's
own, bit for bit; the manifest names the processor and its backend. Processors that keep the
aspect ratio (``shortest_edge``/``longest_edge``, as DETR and YOLOS have) give inputs of the
image's shape. Such inputs are never padded into one batch (padding would change what the
model sees without a pixel mask): the loader batches only consecutive inputs of one shape, so
images of different sizes run one at a time.

Only where the user asks for what the processor cannot give (``--input-size``, greyscale input)
are the processor's values followed with torchvision transforms, and the manifest says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.models.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Fit, Preprocessing

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = ["ProcessorPreprocessing", "from_processor", "processor_backend"]

#: Pillow's resampling numbers, as image processors store them.
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
#: How inputs of different shapes are batched, as the manifest records it.
_BATCHING = (
    "one image per forward where input shapes differ (the loader batches only consecutive "
    "inputs of one shape; nothing is padded)"
)


@dataclass(frozen=True)
class ProcessorPreprocessing(Preprocessing):
    """:class:`Preprocessing` that calls a Hugging Face image processor on each image.

    The inherited fields hold the processor's nominal geometry (its size or crop, mean, std),
    for layer shapes and overlays; the pixels come from the processor itself.

    Attributes:
        processor: The image processor (picklable, so DataLoader workers can run it).
        settings: The processor's configuration as a sorted string: two models compare
            equal only when their processors do.
        keeps_aspect: True when the processor resizes by ``shortest_edge`` (and
            ``longest_edge``) without a crop, so inputs keep the image's aspect ratio.
        size: The processor's ``size`` entries that are set.
        crop_to: The processor's ``crop_size`` when it centre-crops; None otherwise.
    """

    processor: Any = field(default=None, compare=False, repr=False)
    settings: str = ""
    keeps_aspect: bool = False
    size: tuple[tuple[str, int], ...] = ()
    crop_to: tuple[int, int] | None = None

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """An RGB PIL image -> the processor's ``pixel_values`` for it, ``(3, H, W)``."""
        out = self.processor(images=image, return_tensors="pt")
        pixels: torch.Tensor = out["pixel_values"][0]
        return pixels

    def fit(self, size: tuple[int, int]) -> Fit:
        """What the model sees of an image of ``size`` (width, height)."""
        entries = dict(self.size)
        width, height = size
        if self.keeps_aspect:
            new_w, new_h = _edges(width, height, entries)
            return Fit(size, (new_w, new_h), None, 1.0)
        if "height" in entries and "width" in entries and self.crop_to is None:
            return Fit(size, (entries["width"], entries["height"]), None, 1.0)
        return super().fit(size)

    def record(self) -> dict[str, object]:
        """What the processor does, as the manifest records it."""
        entries = dict(self.size)
        crop = list(self.crop_to) if self.crop_to is not None else None
        return {
            "by": "image processor",
            "processor": type(self.processor).__name__,
            "backend": processor_backend(self.processor),
            "resize": entries or None,
            "crop": crop,
            "keeps_aspect_ratio": self.keeps_aspect,
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "batching": _BATCHING if self.keeps_aspect else "batched (one input size)",
            "from": self.origin or None,
        }


def processor_backend(processor: Any) -> str:
    """Which backend an image processor computes with: ``torchvision`` or ``pil`` (its
    ``backend`` in transformers 5; before, a ``...Fast`` class was torchvision's)."""
    backend = getattr(processor, "backend", None)
    if isinstance(backend, str) and backend:
        return backend
    return "torchvision" if type(processor).__name__.endswith("Fast") else "pil"


def _edges(width: int, height: int, entries: dict[str, int]) -> tuple[int, int]:
    """``(width, height)`` after a ``shortest_edge`` resize capped by ``longest_edge``, as
    DETR's processor computes it."""
    shortest, longest = entries.get("shortest_edge"), entries.get("longest_edge")
    short, long = min(width, height), max(width, height)
    if shortest is None:
        target = longest or long
        scale = target / long
        return max(1, round(width * scale)), max(1, round(height * scale))
    if longest is not None and long / short * shortest > longest:
        shortest = round(longest * short / long)
    if width <= height:
        return shortest, int(shortest * height / width)
    return int(shortest * width / height), shortest


def _get(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return value.get(key)
    return getattr(value, key, None)


def _entries(value: Any) -> dict[str, int]:
    keys = ("height", "width", "shortest_edge", "longest_edge")
    return {key: int(v) for key in keys if isinstance(v := _get(value, key), int)}


def from_processor(
    processor: Any,
    ref: str,
    config_size: tuple[int, int],
    input_size: tuple[int, int] | None,
    in_chans: int,
) -> Preprocessing:
    """The processor itself as the model's preprocessing; with ``--input-size`` or greyscale
    input, what it does followed with torchvision transforms, and ``from`` saying so."""
    name = type(processor).__name__.removesuffix("Pil").removesuffix("Fast")
    origin = f"{name} from {ref}/preprocessor_config.json"
    resample = getattr(processor, "resample", 2)
    value = getattr(resample, "value", resample)
    interpolation = _RESAMPLE.get(value, "bilinear") if isinstance(value, int) else "bilinear"
    if getattr(processor, "do_normalize", True):
        mean = tuple(float(v) for v in getattr(processor, "image_mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in getattr(processor, "image_std", IMAGENET_STD))
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    size = _entries(getattr(processor, "size", None))
    crops = bool(getattr(processor, "do_center_crop", False))
    crop = _entries(getattr(processor, "crop_size", None)) if crops else {}
    if input_size is not None or in_chans != 3:
        asked = "--input-size" if input_size is not None else "greyscale input"
        follow = interpolation if interpolation in ("bilinear", "bicubic") else "bilinear"
        common: dict[str, Any] = {"mean": mean, "std": std, "interpolation": follow}
        approx = _approximated(processor, size, crop, config_size, input_size, in_chans, common)
        return approx.described(
            f"{origin}, followed with torchvision transforms for {asked} ({follow} resize; "
            "not bit-exact)"
        )
    shortest = size.get("shortest_edge")
    crop_pct = getattr(processor, "crop_pct", None)
    squash = False
    if crop.get("height") and crop.get("width"):
        side = (crop["height"], crop["width"])
        resize = shortest or size.get("height") or max(side)
        nominal = Preprocessing.fitted(resize=resize, crop=max(side), input_size=side)
    elif shortest and isinstance(crop_pct, float):
        # ConvNeXt's processor: below 384, the shorter side to size / crop_pct and a centre
        # crop; from 384 on, the whole image warped to a square.
        squash = shortest >= 384
        resize = shortest if squash else int(shortest / crop_pct)
        nominal = Preprocessing.fitted(resize=resize, crop=shortest)
        crop = {"height": shortest, "width": shortest}
    elif "height" in size and "width" in size:
        side = (size["height"], size["width"])
        nominal = Preprocessing.fitted(resize=max(side), crop=max(side), input_size=side)
    else:
        resize = shortest or max(config_size)
        nominal = Preprocessing.fitted(resize=resize, crop=max(config_size), crops=False)
    keeps = not crop and ("shortest_edge" in size or "longest_edge" in size)
    backend = f" (its {processor_backend(processor)} backend)"
    return ProcessorPreprocessing(
        resize_size=nominal.resize_size,
        crop_size=nominal.crop_size,
        mean=mean,
        std=std,
        interpolation=interpolation,
        crop=not keeps,
        squash=squash,
        origin=f"{origin}, called on each image{backend}",
        processor=processor,
        settings=repr(sorted(processor.to_dict().items())),
        keeps_aspect=keeps,
        size=tuple(size.items()),
        crop_to=(crop["height"], crop["width"]) if crop.get("height") and not squash else None,
    )


def _approximated(
    processor: Any,
    size: dict[str, int],
    crop: dict[str, int],
    config_size: tuple[int, int],
    input_size: tuple[int, int] | None,
    in_chans: int,
    common: dict[str, Any],
) -> Preprocessing:
    """What the processor does, as torchvision transforms (for an input size or channels the
    processor does not give)."""
    shortest = size.get("shortest_edge")
    if crop.get("height"):
        side = crop["height"]
        resize = shortest or size.get("height") or side
        return Preprocessing.fitted(
            resize=resize, crop=side, input_size=input_size, in_chans=in_chans, **common
        )
    crop_pct = getattr(processor, "crop_pct", None)
    if shortest and isinstance(crop_pct, float) and shortest < 384:
        # ConvNeXt's processor: shorter side to size / crop_pct, then a centre crop.
        return Preprocessing.fitted(
            resize=int(shortest / crop_pct),
            crop=shortest,
            input_size=input_size,
            in_chans=in_chans,
            **common,
        )
    height, width = size.get("height"), size.get("width")
    if shortest:
        height = width = shortest
    if not height or not width:
        height, width = config_size
    target = input_size or (height, width)
    return Preprocessing.fitted(
        resize=max(target),
        crop=max(target),
        input_size=target,
        in_chans=in_chans,
        squash=True,
        **common,
    )
