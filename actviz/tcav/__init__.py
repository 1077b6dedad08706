"""Does a concept move a class? TCAV (``actviz tcav``): concept activation vectors from folders
of a concept's images against random ones (FastCAV by default, or a linear SVM), the TCAV score
of each class over several runs against random vectors', a two-sided test, and the vectors
saved for ``actviz ablate --direction``.

The package is itself callable, ``actviz.tcav(...)`` being :func:`tcav`. Importing it does not
import torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.tcav.cav import CAVS, CavMethod, fast_cav, linear_cav, tcav_scores, two_sided_test
from actviz.tcav.options import TcavOptions
from actviz.tcav.pipeline import tcav
from actviz.tcav.result import TcavResult

__all__ = [
    "CAVS",
    "CavMethod",
    "TcavOptions",
    "TcavResult",
    "fast_cav",
    "linear_cav",
    "tcav",
    "tcav_scores",
    "two_sided_test",
]

callable_package(__name__, tcav)
