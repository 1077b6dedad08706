"""``actviz stats``: a run that draws no picture, for per-layer statistics and anomaly flags.

The package is itself callable, ``actviz.stats(...)`` being :func:`stats`. The statistics
themselves (``compute_stats``, ``Thresholds``, the running summaries, the table) are
:mod:`actviz.statistics`. Importing this package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz import _moved
from actviz.command.package import callable_package
from actviz.stats.command import stats

__all__ = ["stats"]

callable_package(__name__, stats)

if not TYPE_CHECKING:  # an old name warns; the type checker knows only the new ones

    def __getattr__(name: str) -> Any:
        return _moved.moved_name(__name__, name)
