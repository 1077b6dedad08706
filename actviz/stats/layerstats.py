"""The summary of one layer's activations, :class:`LayerStats`, and pooling it over images.

Pure arithmetic on summaries: nothing here touches a tensor. :func:`~actviz.stats.compute_stats`
makes the per-image summaries on the device; :func:`aggregate` and :func:`aggregate_run` pool
them over a folder run.

Conventions:

- Moments, extremes and percentiles are taken over the finite values only; NaN and Inf are
  counted, not averaged. A sample without finite values gets NaN for them.
- ``std`` is the population standard deviation (``ddof=0``), so :func:`aggregate` can pool it
  exactly.
- ``zero_frac`` and ``neg_frac`` are fractions of all elements (``-inf`` counts as negative).
- A channel is dead when none of its finite values is above 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["STAT_FIELDS", "LayerStats", "aggregate", "aggregate_run"]

STAT_FIELDS: tuple[str, ...] = (
    "count",
    "mean",
    "std",
    "min",
    "max",
    "p01",
    "p99",
    "zero_frac",
    "neg_frac",
    "nan",
    "inf",
    "channels",
    "dead_channels",
    "dead_frac",
)
"""The scalar fields of :class:`LayerStats`, in the order the tables list them."""

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
            :func:`actviz.stats.compute.compute_stats`).
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


def _json_float(value: float) -> float | None:
    if not math.isfinite(value):
        return None
    return float(f"{value:.{_SIGNIFICANT}g}")


def aggregate(stats: Sequence[LayerStats]) -> LayerStats:
    """Pool one layer's per-image statistics over a run.

    Moments are exact: the mean is weighted by each image's finite count and the standard
    deviation is the pooled population one (within-image variance plus the spread of the
    image means). Min and max are the extremes of the images', fractions are weighted by
    element count, NaN and Inf counts are summed. Percentiles are the finite-count-weighted
    mean of the per-image percentiles: an approximation, since the values themselves are
    not kept. A channel is dead in the aggregate only when it is dead in every image.

    Args:
        stats: The same layer's statistics for each image (at least one).

    Returns:
        The pooled statistics.

    Raises:
        ValueError: If ``stats`` is empty or the images disagree on the number of channels.
    """
    if not stats:
        raise ValueError("aggregate needs the statistics of at least one image")
    channels = {s.channels for s in stats}
    if len(channels) != 1:
        raise ValueError(f"cannot pool a layer whose channel counts differ: {sorted(channels)}")
    count = sum(s.count for s in stats)
    nan = sum(s.nan for s in stats)
    inf = sum(s.inf for s in stats)
    useful = [s for s in stats if s.finite > 0 and math.isfinite(s.mean)]
    finite = sum(s.finite for s in useful)
    if finite:
        mean = sum(s.finite * s.mean for s in useful) / finite
        var = sum(s.finite * (s.std**2 + (s.mean - mean) ** 2) for s in useful) / finite
        std = math.sqrt(var)
        lo = min(s.min for s in useful)
        hi = max(s.max for s in useful)
        p01 = sum(s.finite * s.p01 for s in useful) / finite
        p99 = sum(s.finite * s.p99 for s in useful) / finite
    else:
        mean = std = lo = hi = p01 = p99 = math.nan
    counted = [s for s in stats if s.count > 0]
    if counted:
        zero_frac = sum(s.count * s.zero_frac for s in counted) / count
        neg_frac = sum(s.count * s.neg_frac for s in counted) / count
    else:
        zero_frac = neg_frac = math.nan
    dead_sets = [set(s.dead_indices) for s in stats]
    dead = tuple(sorted(set.intersection(*dead_sets)))
    (width,) = channels
    return LayerStats(
        count=count,
        mean=mean,
        std=std,
        min=lo,
        max=hi,
        p01=p01,
        p99=p99,
        zero_frac=zero_frac,
        neg_frac=neg_frac,
        nan=nan,
        inf=inf,
        channels=width,
        dead_channels=len(dead),
        dead_frac=len(dead) / width if width else math.nan,
        dead_indices=dead,
    )


def aggregate_run(
    per_image: Mapping[str, Sequence[tuple[str, LayerStats]]],
) -> list[tuple[str, LayerStats]]:
    """The run's aggregate of every layer, in the order the layers were first captured.

    A layer is pooled over the images that have it. A layer whose channel count differs
    between images cannot be pooled and is left out.

    Args:
        per_image: Image key -> ``(layer, stats)`` in depth order.

    Returns:
        ``(layer, pooled stats)`` in depth order.
    """
    by_layer: dict[str, list[LayerStats]] = {}
    for layers in per_image.values():
        for name, s in layers:
            by_layer.setdefault(name, []).append(s)
    return [
        (name, aggregate(group))
        for name, group in by_layer.items()
        if len({s.channels for s in group}) == 1
    ]
