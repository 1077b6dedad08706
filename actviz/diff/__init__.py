"""Comparison: two models (or two images) layer by layer.

The package is itself callable, ``actviz.diff(...)`` being :func:`diff`. Importing it does
not import torch.
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
