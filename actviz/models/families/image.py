"""The image families: classification (class scores out) and semantic segmentation (class
maps out). Both take one stacked, normalized image batch and are called as ``module(x)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actviz.models.families.base import Family
from actviz.models.segmentation import segmentation_logits

if TYPE_CHECKING:
    from torch import nn

__all__ = ["CLASSIFICATION", "SEGMENTATION"]


def _segments(module: nn.Module) -> bool:

    return segmentation_logits(module) is not None


CLASSIFICATION = Family(
    key="classification",
    label="classification",
    torchvision="",
    claims=lambda module: True,  # the last row: any module not claimed otherwise
    outputs="(B, classes) scores: top-k predictions with the weights' class names",
)

SEGMENTATION = Family(
    key="segmentation",
    label="segmentation",
    torchvision="segmentation",
    claims=_segments,
    commands={
        "ablate": (
            "a segmentation model gives a class per pixel, not one per image; use an image "
            "classifier"
        )
    },
    outputs="a dict of (B, classes, H, W) class logits ('out', 'aux'): a per-pixel class map",
)
