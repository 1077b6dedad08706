"""One layer's statistics pooled over images as they come, exactly and in bounded memory.

Every sum is kept exactly, as an integer times a power of two (which every float is), so
nothing is lost to rounding or cancellation, and the result is the same whatever order the
images arrive in or however they are split between summaries merged later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from actviz.statistics.layerstats import LayerStats, _json_float
from actviz.statistics.sketch import Sketch

__all__ = ["ACROSS_IMAGES", "RunningLayer"]

ACROSS_IMAGES: tuple[str, ...] = ("mean", "rms", "max", "dead_frac")
"""The per-image values whose spread over the images ``stats.json`` gives per layer."""

_QUANTILES = (("p01", 0.01), ("p50", 0.5), ("p99", 0.99))


def _split(x: float) -> tuple[int, int]:
    """``(n, e)`` with ``x == n * 2**e`` exactly: every finite float is one."""
    numerator, denominator = x.as_integer_ratio()
    return numerator, 1 - denominator.bit_length()


def _divide(n: int, e: int, denominator: int) -> float:
    """``n * 2**e / denominator`` correctly rounded; beyond the float range, +-inf."""
    try:
        return (n << e) / denominator if e >= 0 else n / (denominator << -e)
    except OverflowError:
        return math.copysign(math.inf, n)


class _Exact:
    """A sum of floats times integers kept exactly, as ``n * 2**e``: nothing is lost to
    rounding or cancellation, and the sum does not depend on the order of its terms."""

    __slots__ = ("e", "n")

    def __init__(self) -> None:
        self.n = 0
        self.e = 0

    def add(self, n: int, e: int) -> None:
        if not self.n:
            self.n, self.e = n, e
        elif e >= self.e:
            self.n += n << (e - self.e)
        else:
            self.n = (self.n << (self.e - e)) + n
            self.e = e

    def add_float(self, x: float, weight: int) -> None:
        n, e = _split(x)
        self.add(weight * n, e)

    def over(self, denominator: int) -> float:
        return _divide(self.n, self.e, denominator)


class RunningLayer:
    """One layer's statistics pooled over images as they come, in bounded memory:
    :meth:`result` is exactly rounded, and dead channels are those dead in every image. Holds
    a set of at most ``channels`` dead indices and four :class:`Sketch` es, nothing per image.
    """

    __slots__ = (
        "_bad",
        "_neg",
        "_p01",
        "_p99",
        "_squares",
        "_sum",
        "_zero",
        "channels",
        "count",
        "dead",
        "finite",
        "images",
        "inf",
        "max",
        "min",
        "mixed",
        "nan",
        "sketches",
    )

    def __init__(self) -> None:
        self.images = 0
        self.channels = 0
        self.mixed = False  # channel counts differed between images: cannot be pooled
        self.count = 0
        self.nan = 0
        self.inf = 0
        self.finite = 0  # finite values of the images with a finite mean
        self.min = math.inf
        self.max = -math.inf
        self.dead: set[int] = set()
        self.sketches = {name: Sketch() for name in ACROSS_IMAGES}
        # Exact sums of finite * mean, finite * (std**2 + mean**2), finite * p01 and p99, and
        # count * zero_frac and neg_frac.
        self._sum, self._squares, self._p01, self._p99 = _Exact(), _Exact(), _Exact(), _Exact()
        self._zero, self._neg = _Exact(), _Exact()
        self._bad: set[str] = set()  # fields fed a non-finite value where a finite one belongs

    def add(self, s: LayerStats) -> None:
        """Fold in one image's statistics of this layer."""
        if self.images == 0:
            self.channels = s.channels
            self.dead = set(s.dead_indices)
        else:
            if s.channels != self.channels:
                self.mixed = True
            if self.dead:
                self.dead.intersection_update(s.dead_indices)
        self.images += 1
        self.count += s.count
        self.nan += s.nan
        self.inf += s.inf
        for name in ACROSS_IMAGES:
            self.sketches[name].add(getattr(s, name))
        finite = s.finite
        if finite > 0 and math.isfinite(s.mean):
            self.finite += finite
            self.min = min(self.min, s.min)
            self.max = max(self.max, s.max)
            n, e = _split(s.mean)
            self._sum.add(finite * n, e)
            self._squares.add(finite * n * n, 2 * e)
            if math.isfinite(s.std):
                n, e = _split(s.std)
                self._squares.add(finite * n * n, 2 * e)
            else:
                self._bad.add("std")
            self._weighted(self._p01, "p01", s.p01, finite)
            self._weighted(self._p99, "p99", s.p99, finite)
            for name in ("min", "max"):
                if not math.isfinite(getattr(s, name)):
                    self._bad.add(name)
        if s.count > 0:
            self._weighted(self._zero, "zero_frac", s.zero_frac, s.count)
            self._weighted(self._neg, "neg_frac", s.neg_frac, s.count)

    def _weighted(self, total: _Exact, name: str, value: float, weight: int) -> None:
        if math.isfinite(value):
            total.add_float(value, weight)
        else:
            self._bad.add(name)

    def merge(self, other: RunningLayer) -> None:
        """Fold in another summary of the same layer over other images."""
        if other.images == 0:
            return
        if self.images == 0:
            self.channels = other.channels
            self.dead = set(other.dead)
        else:
            self.mixed = self.mixed or other.channels != self.channels
            self.dead &= other.dead
        self.mixed = self.mixed or other.mixed
        self.images += other.images
        self.count += other.count
        self.nan += other.nan
        self.inf += other.inf
        self.finite += other.finite
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        for mine, theirs in (
            (self._sum, other._sum),
            (self._squares, other._squares),
            (self._p01, other._p01),
            (self._p99, other._p99),
            (self._zero, other._zero),
            (self._neg, other._neg),
        ):
            mine.add(theirs.n, theirs.e)
        self._bad |= other._bad
        for name in ACROSS_IMAGES:
            self.sketches[name].merge(other.sketches[name])

    def result(self) -> LayerStats | None:
        """The pooled statistics, or None without images or when the images disagree on the
        number of channels (such a layer cannot be pooled and is left out of the run's)."""
        if self.mixed or self.images == 0:
            return None
        nan = math.nan
        finite = self.finite
        if finite:
            mean = self._sum.over(finite)
            # Population variance = (finite * sum of squares - sum**2) / finite**2, exactly.
            total, squares = self._sum, self._squares
            low = min(squares.e, 2 * total.e)
            spread = (squares.n * finite << (squares.e - low)) - (
                total.n * total.n << (2 * total.e - low)
            )
            std = math.sqrt(_divide(spread, low, finite * finite))
            lo, hi = self.min, self.max
            p01 = self._p01.over(finite)
            p99 = self._p99.over(finite)
        else:
            mean = std = lo = hi = p01 = p99 = nan
        if self.count:
            zero_frac = self._zero.over(self.count)
            neg_frac = self._neg.over(self.count)
        else:
            zero_frac = neg_frac = nan
        values = {
            "std": std,
            "min": lo,
            "max": hi,
            "p01": p01,
            "p99": p99,
            "zero_frac": zero_frac,
            "neg_frac": neg_frac,
        }
        values.update(dict.fromkeys(self._bad, nan))
        dead = tuple(sorted(self.dead))
        return LayerStats(
            count=self.count,
            mean=mean,
            nan=self.nan,
            inf=self.inf,
            channels=self.channels,
            dead_channels=len(dead),
            dead_frac=len(dead) / self.channels if self.channels else nan,
            dead_indices=dead,
            **values,
        )

    def across_images(self) -> dict[str, dict[str, float | None]]:
        """``{value: {"p01", "p50", "p99"}}`` over the images, JSON-safe (None when none).

        Interpolated between the two nearest images' values, as ``numpy.quantile``: with
        fewer than 101 images the 1st percentile is not simply the smallest value."""
        return {
            name: {key: _json_float(sketch.quantile(q, interpolate=True)) for key, q in _QUANTILES}
            for name, sketch in self.sketches.items()
        }

    def to_state(self) -> dict[str, Any]:
        """The summary as plain data, which :meth:`from_state` reads back."""
        exact = (self._sum, self._squares, self._p01, self._p99, self._zero, self._neg)
        return {
            "images": self.images,
            "channels": self.channels,
            "mixed": self.mixed,
            "count": self.count,
            "nan": self.nan,
            "inf": self.inf,
            "finite": self.finite,
            "min": self.min,
            "max": self.max,
            "dead": sorted(self.dead),
            "sketches": {name: sketch.to_dict() for name, sketch in self.sketches.items()},
            "exact": [[x.n, x.e] for x in exact],
            "bad": sorted(self._bad),
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> RunningLayer:
        """The summary :meth:`to_state` described."""
        layer = cls()
        layer.images = int(data["images"])
        layer.channels = int(data["channels"])
        layer.mixed = bool(data["mixed"])
        layer.count = int(data["count"])
        layer.nan = int(data["nan"])
        layer.inf = int(data["inf"])
        layer.finite = int(data["finite"])
        layer.min = float(data["min"])
        layer.max = float(data["max"])
        layer.dead = {int(i) for i in data["dead"]}
        layer.sketches = {name: Sketch.from_dict(data["sketches"][name]) for name in ACROSS_IMAGES}
        exact = (layer._sum, layer._squares, layer._p01, layer._p99, layer._zero, layer._neg)
        for total, (n, e) in zip(exact, data["exact"], strict=True):
            total.n, total.e = int(n), int(e)
        layer._bad = {str(name) for name in data["bad"]}
        return layer
