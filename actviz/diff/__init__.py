"""Comparison: two models (or two images) layer by layer.

``actviz.diff(model, inputs, options)`` hooks both models on the same layers, streams a folder
through them keeping running sums only, and reports per layer linear CKA (minibatch debiased
HSIC), mean cosine similarity and relative L2 difference, the first divergent layer, difference
pictures, ``diff.json``, a similarity chart and ``diff.html``.

This package is itself callable, ``actviz.diff(...)`` being :func:`diff`: the package and the
function share the name the API gives them. Importing it does not import torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.diff.compare import diff
from actviz.diff.options import DiffOptions
from actviz.diff.result import DiffResult, LayerDiff

__all__ = [
    "DiffOptions",
    "DiffResult",
    "LayerDiff",
    "diff",
]

callable_package(__name__, diff)
