"""Model families as a table: how each kind of model is fed, what it needs, what its output
means and what makes sense for it.

Each family is one :class:`Family` row (one module each: image.py, detection.py, video.py,
flow.py, quantized.py) of :data:`FAMILIES`. A loaded model carries its family
(``LoadedModel.family``): the batch forward calls the model through ``family.call``, loading
adapts the preprocessing through ``family.preprocessing``, and commands ask
``family.refusal(command)``. A torchvision name's family comes from the registry module it is
in (:func:`torchvision_family`); a module's (a user's own model) from the first row that claims
it (:func:`family_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from actviz.errors import UsageError
from actviz.models.families.base import Family, plain_call
from actviz.models.families.detection import (
    DETECTION,
    detection_transform,
    is_detector,
    lower_score_threshold,
    score_threshold_kept,
)
from actviz.models.families.image import CLASSIFICATION, SEGMENTATION
from actviz.models.families.inputs import CLIPS, IMAGES, PAIRS, Inputs
from actviz.models.families.optical_flow import OPTICAL_FLOW, flow_updates_kept
from actviz.models.families.quantized import FUSED_NOTE, QUANTIZED, is_quantized
from actviz.models.families.video import VIDEO

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "CLASSIFICATION",
    "CLIPS",
    "DETECTION",
    "FAMILIES",
    "FUSED_NOTE",
    "IMAGES",
    "OPTICAL_FLOW",
    "PAIRS",
    "QUANTIZED",
    "SEGMENTATION",
    "VIDEO",
    "Family",
    "Inputs",
    "detection_transform",
    "family_named",
    "family_of",
    "inputs_of",
    "is_detector",
    "is_quantized",
    "lower_score_threshold",
    "plain_call",
    "run_settings_kept",
    "torchvision_family",
]

#: Every family, asked in this order for a module: the first that claims it wins, so the
#: specific ones come first (a quantized detector is quantized) and classification last.
FAMILIES: tuple[Family, ...] = (
    QUANTIZED,
    DETECTION,
    VIDEO,
    OPTICAL_FLOW,
    SEGMENTATION,
    CLASSIFICATION,
)


def family_named(key: str) -> Family:
    """The family called ``key`` (``detection``; ``optical-flow`` also works).

    Raises:
        UsageError: If no family has that name; the message lists them.
    """
    for family in FAMILIES:
        if key in (family.key, family.label):
            return family
    known = ", ".join(family.key for family in FAMILIES)
    raise UsageError(f"unknown model family '{key}'; use one of {known}")


def inputs_of(key: str | None) -> Inputs:
    """What the models of the family called ``key`` take (as a record names it); images for
    a key no family has."""
    return next((family.inputs for family in FAMILIES if family.key == key), IMAGES)


def family_of(module: nn.Module) -> Family:
    """The family of a built model: the first row of :data:`FAMILIES` that claims it."""
    for family in FAMILIES:
        if family.claims(module):
            return family
    return CLASSIFICATION  # pragma: no cover - classification claims every module


def torchvision_family(name: str) -> Family | None:
    """The family of a torchvision registry name, from the ``torchvision.models`` submodule
    it is registered in; None for a name torchvision does not have."""
    from torchvision import models

    for family in FAMILIES:
        module = getattr(models, family.torchvision) if family.torchvision else None
        if module is not None and name in models.list_models(module=module):
            return family
    return CLASSIFICATION if name in models.list_models(module=models) else None


def run_settings_kept(module: nn.Module) -> Callable[[], None]:
    """A function that puts back what a command may change on a model for its run (a
    detector's score cut, a flow model's iteration count) as it is now: a module object the
    caller gave is given back as it came."""
    undo = [score_threshold_kept(module), flow_updates_kept(module)]

    def put_back() -> None:
        for step in undo:
            step()

    return put_back
