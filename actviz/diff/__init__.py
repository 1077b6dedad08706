"""Comparison: two models (or two images) layer by layer.

``actviz.diff(model, inputs, options)`` hooks both models on the same layers, streams a folder
through them keeping running sums only, and reports per layer linear CKA (minibatch debiased
HSIC), mean cosine similarity and relative L2 difference, the first divergent layer, difference
pictures, ``diff.json``, a similarity chart and ``diff.html``.

This package is itself callable, ``actviz.diff(...)`` being :func:`diff`: the package and the
function share the name the API gives them. Importing it does not import torch.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from actviz.diff.compare import diff
from actviz.diff.metrics import (
    CkaResult,
    LayerComparison,
    biased_hsic,
    cosine_similarity,
    relative_l2,
    unbiased_hsic,
)
from actviz.diff.options import DEFAULT_THRESHOLD, DiffOptions
from actviz.diff.pictures import DiffPanels, PictureScale, compose, render_diff
from actviz.diff.result import DiffPicture, DiffResult, LayerDiff, ModelSide, diff_record

__all__ = [
    "DEFAULT_THRESHOLD",
    "CkaResult",
    "DiffOptions",
    "DiffPanels",
    "DiffPicture",
    "DiffResult",
    "LayerComparison",
    "LayerDiff",
    "ModelSide",
    "PictureScale",
    "biased_hsic",
    "compose",
    "cosine_similarity",
    "diff",
    "diff_record",
    "relative_l2",
    "render_diff",
    "unbiased_hsic",
]


class _CallablePackage(types.ModuleType):
    """``actviz.diff`` is both this package and the function: importing the package makes
    Python bind ``actviz.diff`` to it, so calling the package calls :func:`diff`."""

    def __call__(self, *args: Any, **kwargs: Any) -> DiffResult:
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
