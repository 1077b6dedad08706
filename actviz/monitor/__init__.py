"""Watch a model while it trains: per-layer statistics over steps, where the first NaN came
from, flags, the JSON Lines log, TensorBoard and probe pictures.

:func:`watch` is the entry point (also ``actviz.watch``); :func:`read_log` reads its log.
Nothing here imports torch at module level.
"""

from __future__ import annotations

from actviz.monitor.flags import Flag, FlagTracker
from actviz.monitor.log import LOG_NAME, TrainingLog, read_log
from actviz.monitor.nonfinite import Origin
from actviz.monitor.watch import Watch, watch

__all__ = [
    "LOG_NAME",
    "Flag",
    "FlagTracker",
    "Origin",
    "TrainingLog",
    "Watch",
    "read_log",
    "watch",
]
