"""What ``run`` needs from each model family, one module (or package) per family beside the
family's load-time row (:mod:`actviz.models.families`): the per-image picture kinds.

:data:`IMAGE_KINDS` lists every per-image picture, in the order an image's pictures are drawn;
a kind whose family's extras are not in an image's job is not drawn for it.
"""

from __future__ import annotations

from actviz.run.families.base import ImageKind
from actviz.run.families.detection import DETECTION_CAM, DETECTION_HEADS, DETECTIONS
from actviz.run.families.image import INPUT, SEGMENTATION
from actviz.run.families.optical_flow import OPTICAL_FLOW

__all__ = ["IMAGE_KINDS", "ImageKind"]

#: Every per-image picture kind: what the model saw first, then each family's.
IMAGE_KINDS: tuple[ImageKind, ...] = (
    INPUT,
    SEGMENTATION,
    OPTICAL_FLOW,
    DETECTIONS,
    DETECTION_HEADS,
    DETECTION_CAM,
)
