"""What ``run`` needs from each model family, as rows beside the families' load rows
(:mod:`actviz.models.families`): one module (or package) per family, each defining its
:class:`RunFamily` (the options it takes, what a resumed run must match, its per-batch probe,
its per-image pictures) and its place in :data:`RUN_FAMILIES`.

``run`` asks :func:`run_family` for a loaded model's row and never tests which family it is.
:data:`IMAGE_KINDS` lists every per-image picture (what the model saw first, then each
family's); a kind whose extras are not in an image's job is not drawn for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actviz.run.families.base import (
    Batch,
    Extras,
    FamilyOption,
    ImageKind,
    Probe,
    RunFamily,
    Same,
)
from actviz.run.families.detection import DETECTION_RUN
from actviz.run.families.image import (
    CLASSIFICATION_RUN,
    INPUT,
    QUANTIZED_RUN,
    SEGMENTATION_RUN,
)
from actviz.run.families.optical_flow import OPTICAL_FLOW_RUN
from actviz.run.families.video import VIDEO_RUN

if TYPE_CHECKING:
    from actviz.models.families import Family

__all__ = [
    "IMAGE_KINDS",
    "RUN_FAMILIES",
    "Batch",
    "Extras",
    "FamilyOption",
    "ImageKind",
    "Probe",
    "RunFamily",
    "Same",
    "run_family",
]

#: Every family's run row. Their options are taken in this order (a clip's length, a flow
#: model's iterations, then a detector's threshold), each refused where it does not apply.
RUN_FAMILIES: tuple[RunFamily, ...] = (
    VIDEO_RUN,
    OPTICAL_FLOW_RUN,
    DETECTION_RUN,
    QUANTIZED_RUN,
    SEGMENTATION_RUN,
    CLASSIFICATION_RUN,
)

#: Every per-image picture kind: what the model saw first, then each family's.
IMAGE_KINDS: tuple[ImageKind, ...] = (
    INPUT,
    *dict.fromkeys(kind for row in RUN_FAMILIES for kind in row.pictures),
)


def run_family(family: Family) -> RunFamily:
    """The run row of ``family``; a row that adds nothing for a family without one (``run``
    takes its models as it takes any image model)."""
    return next((row for row in RUN_FAMILIES if row.family.key == family.key), RunFamily(family))
