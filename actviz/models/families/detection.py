"""Object detection and instance segmentation: torchvision's Faster/Mask/Keypoint R-CNN,
RetinaNet, FCOS, SSD and SSDlite (and a user's own model built on them).

These models take a list of ``(C, H, W)`` images in 0..1 and run their own transform
(``GeneralizedRCNNTransform``): normalize, resize to ``min_size``/``max_size`` (SSD: a fixed
size), and batch with padding to ``size_divisible``. So actviz hands them each decoded image as
it is, in 0..1 at its own size (:class:`DetectorInput`), and lets the model do the rest: the
maps are ``model.backbone(model.transform([image])[0].tensors)`` (the padding cropped off),
and the boxes the model returns are in the image's own pixels. In eval mode the output is
one dict per image: ``boxes``, ``labels``, ``scores`` (and ``masks``, ``keypoints``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.contexts import type_names
from actviz.models.families.base import Family
from actviz.models.preprocessing import Fit, Preprocessing

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from torch import nn

__all__ = [
    "DETECTION",
    "DetectorInput",
    "detection_transform",
    "detector_classes",
    "is_detector",
    "lower_score_threshold",
    "score_threshold_kept",
]

#: torchvision's detector classes (and their bases): a subclass is a detector too.
_DETECTORS = frozenset({"GeneralizedRCNN", "RetinaNet", "FCOS", "SSD"})


def is_detector(module: nn.Module) -> bool:
    """True for torchvision's detectors and models built on them."""

    return bool(type_names(module) & _DETECTORS)


def detector_classes(module: nn.Module) -> int | None:
    """How many classes a torchvision detector scores (background included, as the weights'
    categories list them); None when it does not say."""
    roi_heads = getattr(module, "roi_heads", None)
    predictor = getattr(roi_heads, "box_predictor", None)
    score = getattr(predictor, "cls_score", None)
    if score is not None:  # Faster, Mask and Keypoint R-CNN
        return int(score.out_features)
    head = getattr(getattr(module, "head", None), "classification_head", None)
    classes = getattr(head, "num_classes", None)  # RetinaNet, FCOS, SSD
    return int(classes) if isinstance(classes, int) else None


def detection_transform(module: nn.Module) -> Any:
    """The detector's own ``GeneralizedRCNNTransform`` (None when it has none)."""
    transform = getattr(module, "transform", None)
    return transform if type(transform).__name__ == "GeneralizedRCNNTransform" else None


def _selector(module: nn.Module) -> str | None:
    """The backbone's stages, every FPN level (``backbone.fpn[0]`` ... ``[pool]``) and the
    RPN's objectness per level (``rpn.head.cls_logits``, ``:2``...); SSD's feature maps."""
    names = {name for name, _ in module.named_modules()}
    terms = []
    if "backbone.body" in names:
        stages = [n for n in names if re.fullmatch(r"backbone\.body\.layer\d+", n)]
        terms.append(r"re:^backbone\.body\.layer\d+$" if stages else r"re:^backbone\.body\.\d+$")
    if "backbone.fpn" in names:
        terms.append("backbone.fpn")
    elif "backbone" in names and not terms:
        terms.append("backbone")  # SSD's extractor returns its feature maps as a dict
    if "rpn.head.cls_logits" in names:
        terms.append("rpn.head.cls_logits")
    return ",".join(terms) or None


def lower_score_threshold(module: nn.Module, threshold: float) -> float | None:
    """Make the detector keep boxes down to ``threshold`` (its own cut is 0.05 for the R-CNNs,
    0.01 to 0.2 for the others); returns the cut it had when it was lowered, else None."""
    owner = getattr(module, "roi_heads", module)
    current = getattr(owner, "score_thresh", None)
    if not isinstance(current, float) or threshold >= current:
        return None
    owner.score_thresh = threshold
    return current


def score_threshold_kept(module: nn.Module) -> Callable[[], None]:
    """A function that puts back the score cut the detector has now (what
    :func:`lower_score_threshold` changes for a run); a no-op for other models."""
    owner = getattr(module, "roi_heads", module)
    current = getattr(owner, "score_thresh", None)

    def put_back() -> None:
        if isinstance(current, float):
            owner.score_thresh = current

    return put_back


def _builder_kwargs(input_size: tuple[int, int] | None) -> dict[str, Any]:
    """``--input-size H,W`` as the detector's own resize: the shorter side to ``min(H, W)``,
    the longer at most ``max(H, W)``."""
    if input_size is None:
        return {}
    return {"min_size": min(input_size), "max_size": max(input_size)}


def _call(module: Any, x: Any) -> Any:
    """The batch as the list of images a detector takes."""
    return module(list(x.unbind(0)))


@dataclass(frozen=True)
class DetectorInput(Preprocessing):
    """A decoded image as a detector takes it: in 0..1 at its own size, unnormalized. The
    detector's own transform normalizes, resizes (bilinear, not antialiased, as it was
    trained) and pads it, so the maps are torchvision's and the boxes are in the image's
    pixels. No pre-resize: any resampling before the model's own would change its input.

    The inherited fields hold the nominal geometry (``min_size`` square) for layer shapes.

    Attributes:
        min_size: The shorter side the model resizes an image to.
        max_size: The longest side it allows (the shorter one gives way).
        fixed: ``(height, width)`` every image is resized to (SSD); None otherwise.
    """

    min_size: int = 800
    max_size: int = 1333
    fixed: tuple[int, int] | None = None

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """An RGB PIL image -> a ``(channels, H, W)`` tensor in 0..1 at the image's size."""
        from torchvision.transforms import functional as F

        if self.channels == 1:
            image = image.convert("L")
        tensor: torch.Tensor = F.convert_image_dtype(F.pil_to_tensor(image))
        return tensor

    def fit(self, size: tuple[int, int]) -> Fit:
        """The size the detector's transform resizes an image of ``size`` to: all of it."""
        width, height = size
        if self.fixed is not None:
            return Fit(size, (self.fixed[1], self.fixed[0]), None, 1.0)
        scale = min(self.min_size / max(min(size), 1), self.max_size / max(max(size), 1))
        return Fit(size, (max(1, int(width * scale)), max(1, int(height * scale))), None, 1.0)

    def record(self) -> dict[str, object]:
        """The input as the manifest records it: the image as decoded, the rest the model's."""
        return {
            "resize": None,
            "crop": None,
            "by": "the model's own transform",
            "min_size": None if self.fixed else self.min_size,
            "max_size": None if self.fixed else self.max_size,
            "fixed_size": list(self.fixed) if self.fixed else None,
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "from": self.origin or None,
        }


def _preprocessing(preprocess: Preprocessing, module: nn.Module) -> Preprocessing:
    """Each image in 0..1 at its own size: the model normalizes, resizes and pads it itself."""
    transform = detection_transform(module)
    if transform is None:
        return preprocess
    fixed = getattr(transform, "fixed_size", None)
    sizes = tuple(getattr(transform, "min_size", (800,)))
    side = int(min(fixed) if fixed else sizes[-1])
    how = (
        f"fixed size {fixed[1]}x{fixed[0]}"
        if fixed
        else f"min_size {side}, max_size {int(transform.max_size)}"
    )
    return DetectorInput(
        resize_size=side,
        crop_size=(int(fixed[1]), int(fixed[0])) if fixed else (side, side),
        mean=(0.0,) * preprocess.channels,
        std=(1.0,) * preprocess.channels,
        channels=preprocess.channels,
        interpolation="bilinear",
        crop=False,
        origin=(
            f"the model's own transform (GeneralizedRCNNTransform: {how}, bilinear, padded "
            f"to a multiple of {int(transform.size_divisible)}, normalized with mean "
            f"{list(transform.image_mean)} and std {list(transform.image_std)}), on each "
            "image as decoded"
        ),
        min_size=side,
        max_size=int(transform.max_size),
        fixed=(int(fixed[1]), int(fixed[0])) if fixed else None,
    )


DETECTION = Family(
    key="detection",
    label="detection",
    torchvision="detection",
    claims=is_detector,
    classes=detector_classes,
    call=_call,
    preprocessing=_preprocessing,
    classifies=False,
    gradients=(
        "a detector has no class score per image to take the gradient of; --cam draws "
        "EigenCAM and the Grad-CAM of one detection's score (--detection N)"
    ),
    commands={
        "optimize": (
            "a detector's output is a list of boxes, not a score to maximize; optimize a "
            "classifier or backbone (resnet50, ...)"
        ),
        "ablate": (
            "a detector's output is boxes, not one class per image to measure; use a "
            "classifier (resnet50, ...)"
        ),
        "cam-eval": (
            "cam-eval scores maps by one class score per image, and a detector gives boxes; "
            "draw a detection's maps with actviz run --cam (--detection N)"
        ),
    },
    selector=_selector,
    one_size=(
        "a detector resizes each image itself, keeping its aspect ratio, whatever "
        "--input-size says: images of one aspect ratio give maps of one size"
    ),
    readouts=(
        "rpn.head.cls_logits",  # the R-CNNs' objectness per anchor
        "rpn.head.bbox_pred",
        "roi_heads.box_predictor*",
        "roi_heads.mask_predictor.mask_fcn_logits",
        "roi_heads.keypoint_predictor*",
        "head.classification_head.cls_logits",  # RetinaNet, FCOS
        "head.regression_head.bbox_reg",
        "head.regression_head.bbox_ctrness",
        "head.classification_head.module_list*",  # SSD, SSDlite
        "head.regression_head.module_list*",
    ),
    builder_kwargs=_builder_kwargs,
    meta_stops=(
        "the heads' box selection (NMS) has data-dependent shapes, which the meta device "
        "cannot compute: the modules after it are listed without shapes"
    ),
    outputs=(
        "one dict per image: boxes (x1, y1, x2, y2 in input pixels), labels, scores "
        "(masks, keypoints)"
    ),
)
