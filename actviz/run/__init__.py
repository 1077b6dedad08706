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

import sys
import types
from typing import Any

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


class _CallablePackage(types.ModuleType):
    """``actviz.run`` is both this package and the function: importing the package makes
    Python bind ``actviz.run`` to it, so calling the package calls :func:`run`."""

    def __call__(self, *args: Any, **kwargs: Any) -> RunResult:
        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
