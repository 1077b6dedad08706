"""Interventions over a folder (``actviz ablate``): knock units, a sparse dictionary's features
or a direction out of one layer of a classifier, and measure per class what it loses
(accuracy and balanced accuracy before and after, the change of the class's logit, the classes
that take the lost images), with sweeps ranked per class and importance curves.

The package is itself callable, ``actviz.ablate(...)`` being :func:`ablate`. Importing it does
not import torch.
"""

from __future__ import annotations

from actviz.ablate.command import ablate
from actviz.ablate.modes import MODES, Mode, parse_mode
from actviz.ablate.options import FAIL_METRICS, AblateOptions
from actviz.ablate.result import AblateResult
from actviz.command.package import callable_package

__all__ = [
    "FAIL_METRICS",
    "MODES",
    "AblateOptions",
    "AblateResult",
    "Mode",
    "ablate",
    "parse_mode",
]

callable_package(__name__, ablate)
