"""Faithfulness of CAM methods over a folder: deletion and insertion curves, the change in
confidence on the map-masked image, the baselines every method must beat, and the
cascading-randomization sanity check (``actviz cam-eval``).

The package is itself callable, ``actviz.cam_eval(...)`` being :func:`cam_eval`. Importing it
does not import torch.
"""

from __future__ import annotations

from actviz.cam_eval.evaluate import CamEvalResult, cam_eval
from actviz.cam_eval.metrics import BASELINES, Protocol
from actviz.cam_eval.options import DEFAULT_METHODS, CamEvalOptions
from actviz.command.package import callable_package

__all__ = [
    "BASELINES",
    "DEFAULT_METHODS",
    "CamEvalOptions",
    "CamEvalResult",
    "Protocol",
    "cam_eval",
]

callable_package(__name__, cam_eval)
