"""The summary of one layer's activations, :class:`LayerStats`, and pooling it over images.

Pure data: nothing here touches a tensor. :func:`~actviz.statistics.compute_stats` makes the
per-image summaries on the device; :class:`~actviz.statistics.RunningStats` pools them over a folder
run.

Conventions:

- Moments, extremes and percentiles are taken over the finite values only; NaN and Inf are
  counted, not averaged. A sample without finite values gets NaN for them.
- ``std`` is the population standard deviation (``ddof=0``), so it can be pooled exactly.
- ``zero_frac`` and ``neg_frac`` are fractions of all elements (``-inf`` counts as negative).
- A channel is dead when none of its finite values is above 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["CSV_FIELDS", "RUN_KEY", "STAT_FIELDS", "LayerStats"]

RUN_KEY = "(all)"
"""The ``image`` of the rows that hold the aggregate over every image of a run."""

_SIGNIFICANT = 7  # float32 carries about 7 significant digits; more would be noise in JSON


@dataclass(frozen=True)
class LayerStats:
    """Summary of one layer's output for one image (or pooled over many).

    Attributes:
        count: Number of elements.
        mean: Mean of the finite values.
        std: Population standard deviation of the finite values.
        min: Smallest finite value.
        max: Largest finite value.
        p01: 1st percentile of the finite values (nearest rank, see
            :func:`actviz.statistics.compute.compute_stats`).
        p99: 99th percentile of the finite values.
        zero_frac: Fraction of all elements that are exactly 0.
        neg_frac: Fraction of all elements below 0.
        nan: Number of NaN elements.
        inf: Number of +Inf and -Inf elements.
        channels: Size of the channel dimension.
        dead_channels: Channels none of whose finite values is above 0.
        dead_frac: ``dead_channels / channels``.
        dead_indices: The dead channels' indices, ascending.

    The float fields are finite, or NaN when there is nothing finite to summarise.
    """

    count: int
    mean: float
    std: float
    min: float
    max: float
    p01: float
    p99: float
    zero_frac: float
    neg_frac: float
    nan: int
    inf: int
    channels: int
    dead_channels: int
    dead_frac: float
    dead_indices: tuple[int, ...] = field(default=(), repr=False)

    @property
    def finite(self) -> int:
        """Number of finite elements."""
        return self.count - self.nan - self.inf

    @property
    def rms(self) -> float:
        """Root mean square of the finite values: the layer's magnitude."""
        return math.sqrt(self.mean * self.mean + self.std * self.std)

    @property
    def per_channel(self) -> int:
        """Elements per channel (1 for a vector such as logits)."""
        return self.count // self.channels if self.channels else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe values: NaN and Inf become None, floats keep 7 significant digits."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float):
                data[key] = _json_float(value)
        data["dead_indices"] = list(self.dead_indices)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerStats:
        """The inverse of :meth:`to_dict` (None becomes NaN)."""
        values: dict[str, Any] = {}
        for key in STAT_FIELDS:
            value = data[key]
            values[key] = math.nan if value is None else value
        return cls(**values, dead_indices=tuple(data.get("dead_indices", ())))


STAT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LayerStats) if f.name != "dead_indices")
"""The scalar fields of :class:`LayerStats`, in the order the tables list them."""

CSV_FIELDS: tuple[str, ...] = ("image", "layer", *STAT_FIELDS, "flags")
"""The columns of ``stats.csv``, in order."""


def _json_float(value: float) -> float | None:
    if not math.isfinite(value):
        return None
    return float(f"{value:.{_SIGNIFICANT}g}")
