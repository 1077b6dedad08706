"""``actviz run`` (and ``actviz stats``): every image through the model, one picture per layer.

The pieces: :func:`run` (the command, in named steps), its options (:class:`RunOptions` and
its groups), the loop that streams a folder through the hooked model and draws each batch in
threads (:mod:`actviz.run.loop`), the drawing of one image's layers (:mod:`actviz.run.draw`),
the gradient and segmentation pictures, the statistics files, and the Ray worker
(:mod:`actviz.run.on_ray`).

This package is itself callable, ``actviz.run(...)`` being :func:`run`: the package and the
function share the name the API gives them. Importing it does not import torch.
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
