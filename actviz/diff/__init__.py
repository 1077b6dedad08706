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
from actviz.diff.options import DiffOptions
from actviz.diff.result import DiffResult, LayerDiff

__all__ = [
    "DiffOptions",
    "DiffResult",
    "LayerDiff",
    "diff",
]


class _CallablePackage(types.ModuleType):
    """``actviz.diff`` is both this package and the function: importing the package makes
    Python bind ``actviz.diff`` to it, so calling the package calls :func:`diff`."""

    def __call__(self, *args: Any, **kwargs: Any) -> DiffResult:
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
