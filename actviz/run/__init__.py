"""``actviz run`` (and ``actviz stats``): every image through the model, one picture per layer.

The package is itself callable, ``actviz.run(...)`` being :func:`run`. Importing it does
not import torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.run.command import run
from actviz.run.options import DrawOptions, GradientOptions, RunOptions
from actviz.run.result import RunResult

__all__ = [
    "DrawOptions",
    "GradientOptions",
    "RunOptions",
    "RunResult",
    "run",
]

callable_package(__name__, run)
