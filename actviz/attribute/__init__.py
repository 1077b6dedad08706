"""Attribution beyond CAM: which input pixels a classifier's class score rests on, per image
(``actviz attribute``): Integrated Gradients, SmoothGrad, gradient x input, LRP and attention
rollout, each drawn over what the model saw, each with its axiom checked and recorded.

The package is itself callable, ``actviz.attribute(...)`` being :func:`attribute`. Importing it
does not import torch.
"""

from __future__ import annotations

from actviz.attribute.command import attribute
from actviz.attribute.options import DEFAULT_METHODS, AttributeOptions
from actviz.attribute.result import AttributeResult
from actviz.command.package import callable_package
from actviz.gradients.attribution import AttributionSettings

__all__ = [
    "DEFAULT_METHODS",
    "AttributeOptions",
    "AttributeResult",
    "AttributionSettings",
    "attribute",
]

callable_package(__name__, attribute)
