"""Feature visualization by optimization: for each selected channel, an image optimized to
excite it (Olah et al., Distill 2017; Lucent's recipe), many channels at once in one batch.

The pieces: :func:`optimize` (the whole command), :func:`optimize_batch` (one layer's channels
in one batch, no files), the parameterization (:class:`FourierImage`), Lucent's transforms
(:mod:`actviz.optimize.transforms`), the objective (:class:`Objective`) and the sheet
(:func:`layer_sheet`). The package is itself callable, ``actviz.optimize(...)`` being
:func:`optimize`. Importing this package imports no torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.optimize.loop import BatchResult as BatchResult
from actviz.optimize.loop import LayerTarget as LayerTarget
from actviz.optimize.loop import optimize_batch as optimize_batch
from actviz.optimize.objective import Objective as Objective
from actviz.optimize.objective import parse_channels as parse_channels
from actviz.optimize.options import OptimizeOptions as OptimizeOptions
from actviz.optimize.param import FourierImage as FourierImage
from actviz.optimize.pipeline import JSON_FILE as JSON_FILE
from actviz.optimize.pipeline import RANDOM_NOTE as RANDOM_NOTE
from actviz.optimize.pipeline import REPORT_FILE as REPORT_FILE
from actviz.optimize.pipeline import ChannelImage as ChannelImage
from actviz.optimize.pipeline import LayerImages as LayerImages
from actviz.optimize.pipeline import OptimizeResult as OptimizeResult
from actviz.optimize.pipeline import StepReporter as StepReporter
from actviz.optimize.pipeline import optimize as optimize
from actviz.optimize.sheet import layer_sheet as layer_sheet

__all__ = [
    "JSON_FILE",
    "RANDOM_NOTE",
    "REPORT_FILE",
    "BatchResult",
    "ChannelImage",
    "FourierImage",
    "LayerImages",
    "LayerTarget",
    "Objective",
    "OptimizeOptions",
    "OptimizeResult",
    "StepReporter",
    "layer_sheet",
    "optimize",
    "optimize_batch",
    "parse_channels",
]

callable_package(__name__, optimize)
