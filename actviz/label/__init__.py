"""What the units of a layer detect, named from the user's own data (``actviz label``): tags,
classes, pixel masks or a local CLIP model's words as concepts; every unit scored against every
concept by metrics that pass the sanity checks, tested by permutation, corrected by
Benjamini-Hochberg; the concepts' learnability from the layer and from the pixels.

The package is itself callable, ``actviz.label(...)`` being :func:`label`. Importing it does
not import torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.label.metrics import METRICS, Metric
from actviz.label.options import LabelOptions
from actviz.label.pipeline import label
from actviz.label.result import LabelResult, LayerResult
from actviz.label.significance import benjamini_hochberg

__all__ = [
    "METRICS",
    "LabelOptions",
    "LabelResult",
    "LayerResult",
    "Metric",
    "benjamini_hochberg",
    "label",
]

callable_package(__name__, label)
