"""Object detection and instance segmentation: torchvision's Faster/Mask/Keypoint R-CNN,
RetinaNet, FCOS, SSD and SSDlite (and a user's own model built on them).

These models take a list of ``(C, H, W)`` images in 0..1 and run their own transform
(``GeneralizedRCNNTransform``): normalize, resize to ``min_size``/``max_size`` (SSD: a fixed
size), and batch with padding to ``size_divisible``. So actviz hands them the decoded images
unnormalized, resized only as far as the model would resize them itself, and lets the model do
the rest; the maps it records are at the model's internal resolution, padding included.
In eval mode the output is one dict per image: ``boxes``, ``labels``, ``scores`` (and
``masks``, ``keypoints``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.models.families.base import Family

if TYPE_CHECKING:
    from torch import nn

    from actviz.models.preprocessing import Preprocessing

__all__ = ["DETECTION", "detection_transform", "is_detector"]

#: torchvision's detector classes (and their bases): a subclass is a detector too.
_DETECTORS = frozenset({"GeneralizedRCNN", "RetinaNet", "FCOS", "SSD"})


def is_detector(module: nn.Module) -> bool:
    """True for torchvision's detectors and models built on them."""
    from actviz.contexts import type_names

    return bool(type_names(module) & _DETECTORS)


def detection_transform(module: nn.Module) -> Any:
    """The detector's own ``GeneralizedRCNNTransform`` (None when it has none)."""
    transform = getattr(module, "transform", None)
    return transform if type(transform).__name__ == "GeneralizedRCNNTransform" else None


def _call(module: Any, x: Any) -> Any:
    """The batch as the list of images a detector takes."""
    return module(list(x.unbind(0)))


def _preprocessing(preprocess: Preprocessing, module: nn.Module) -> Preprocessing:
    """0..1 images (the model normalizes them itself), the shorter side resized to the
    model's ``min_size`` (which its transform would do, capped by ``max_size``), no crop."""
    from actviz.models.preprocessing import Preprocessing

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
    return Preprocessing(
        resize_size=side,
        crop_size=(int(fixed[0]), int(fixed[1])) if fixed else (side, side),
        mean=(0.0,) * preprocess.channels,
        std=(1.0,) * preprocess.channels,
        channels=preprocess.channels,
        interpolation="bilinear",
        crop=False,
        origin=(
            f"the model's own transform (GeneralizedRCNNTransform: {how}, padded to a "
            f"multiple of {int(transform.size_divisible)}, normalized with mean "
            f"{list(transform.image_mean)} and std {list(transform.image_std)})"
        ),
    )


DETECTION = Family(
    key="detection",
    label="detection",
    torchvision="detection",
    claims=is_detector,
    call=_call,
    preprocessing=_preprocessing,
    classifies=False,
    gradients=(
        "a detector has no class scores per image: Grad-CAM takes the score of one "
        "detection (--cam with --detection)"
    ),
    commands={
        "optimize": "a detector's output is a list of boxes, not a score to maximize",
        "top-images": "a detector has no per-image class to rank images by",
    },
    meta_stops=(
        "the heads' box selection (NMS) has data-dependent shapes, which the meta device "
        "cannot compute: the modules after it are listed without shapes"
    ),
    outputs=(
        "one dict per image: boxes (x1, y1, x2, y2 in input pixels), labels, scores "
        "(masks, keypoints)"
    ),
)
