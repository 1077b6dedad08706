"""A mergeable quantile sketch of floats with bounded size: :class:`Sketch`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Sketch"]


class _Store:
    """Counts per bucket index; at most ``cap`` indices, the lowest folded into the lowest kept.

    Every count sits at ``max(its index, hi - cap + 1)`` where ``hi`` is the highest index seen:
    a function of the values alone, whatever order they came in.
    """

    __slots__ = ("cap", "counts", "hi", "lo")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts: dict[int, int] = {}
        self.lo = 0
        self.hi = 0

    def add(self, index: int, n: int = 1) -> None:
        counts = self.counts
        if counts and self.lo <= index <= self.hi:  # the common case: nothing moves
            counts[index] = counts.get(index, 0) + n
            return
        if not counts:
            self.lo = self.hi = index
        elif index > self.hi:
            self.hi = index
        floor = self.hi - self.cap + 1
        index = max(index, floor)
        self.counts[index] = self.counts.get(index, 0) + n
        if index < self.lo:
            self.lo = index
        if self.lo < floor:
            folded = sum(n for i, n in self.counts.items() if i < floor)
            self.counts = {i: n for i, n in self.counts.items() if i >= floor}
            self.counts[floor] = self.counts.get(floor, 0) + folded
            self.lo = floor

    def items(self) -> list[list[int]]:
        return [[i, self.counts[i]] for i in sorted(self.counts)]


class Sketch:
    """Quantiles of a stream of floats in bounded memory, DDSketch-style.

    A positive value ``x`` is counted in bucket ``ceil(log(x) / log(gamma))`` with
    ``gamma = (1 + alpha) / (1 - alpha)``; a bucket's representative value is within ``alpha``
    (1 %) of every value it holds. Negative values have their own buckets (by magnitude) and
    zeros a count of their own. NaN and the infinities are not counted. Each sign keeps at
    most ``max_buckets`` buckets (1024 span a 10^8-fold range of magnitudes at 1 %); beyond
    that the smallest magnitudes are folded into the smallest kept bucket, so only values
    that close to zero lose accuracy.

    Adding and merging are exact integer counts: the state, and so :meth:`to_dict` and every
    quantile, is the same whatever order values are added in or sketches are merged.

    Written here rather than taken from a library (DDSketch's package, t-digest) because that
    order independence is what lets a resumed run, a run whose images finish in another order
    and a Ray run whose actors each summarise a share write the same ``stats.json``: t-digest
    does not have it, and here it is a property of sixty lines this project tests, not one a
    dependency would have to keep across its versions.
    """

    __slots__ = ("_log_gamma", "_negative", "_positive", "_zero", "alpha", "max_buckets")

    def __init__(self, alpha: float = 0.01, max_buckets: int = 1024) -> None:
        if not 0.0 < alpha < 1.0 or max_buckets < 1:
            raise ValueError("a sketch needs 0 < alpha < 1 and max_buckets >= 1")
        self.alpha = alpha
        self.max_buckets = max_buckets
        self._log_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
        self._zero = 0
        self._positive = _Store(max_buckets)
        self._negative = _Store(max_buckets)

    @property
    def count(self) -> int:
        """Number of values counted (NaN and infinities excluded)."""
        stores = (self._positive, self._negative)
        return self._zero + sum(n for store in stores for n in store.counts.values())

    def add(self, value: float) -> None:
        """Count one value; NaN and the infinities are ignored."""
        if value == 0.0:
            self._zero += 1
        elif math.isfinite(value):
            store = self._positive if value > 0.0 else self._negative
            store.add(math.ceil(math.log(abs(value)) / self._log_gamma))

    def merge(self, other: Sketch) -> None:
        """Add every value ``other`` counted, as if they had been added here."""
        if (other.alpha, other.max_buckets) != (self.alpha, self.max_buckets):
            raise ValueError("only sketches with the same alpha and max_buckets merge")
        self._zero += other._zero
        for mine, theirs in ((self._positive, other._positive), (self._negative, other._negative)):
            for index, n in sorted(theirs.counts.items(), reverse=True):
                mine.add(index, n)

    def quantile(self, q: float, *, interpolate: bool = False) -> float:
        """The ``q``-quantile (0 <= q <= 1) within ``alpha`` relative, NaN when empty.

        The value of rank ``floor(q * (count - 1))`` in sorted order, as
        ``numpy.quantile(values, q, method="lower")``; with ``interpolate``, the linear
        interpolation between the values of ranks ``floor`` and ``ceil`` of ``q * (count - 1)``,
        as ``numpy.quantile(values, q)``: over 24 values the 1st percentile is then not simply
        the smallest value, nor the 99th the second largest.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile is between 0 and 1, not {q}")
        total = self.count
        if not total:
            return math.nan
        rank = q * (total - 1)
        low = self._ranked(math.floor(rank))
        fraction = rank - math.floor(rank)
        if not interpolate or fraction == 0.0:
            return low
        return low + (self._ranked(math.floor(rank) + 1) - low) * fraction

    def _ranked(self, rank: int) -> float:
        """The value of 0-based ``rank`` in sorted order (``0 <= rank < count``)."""
        seen = 0
        for index in sorted(self._negative.counts, reverse=True):
            seen += self._negative.counts[index]
            if seen > rank:
                return -self._value(index)
        seen += self._zero
        if seen > rank:
            return 0.0
        positive = sorted(self._positive.counts)
        for index in positive:
            seen += self._positive.counts[index]
            if seen > rank:
                return self._value(index)
        return self._value(positive[-1])  # not reached: the counts add up to total

    def _value(self, index: int) -> float:
        # 2 gamma^i / (gamma + 1), within alpha of all of (gamma^(i-1), gamma^i]; in logs, so
        # the bucket of the largest float does not overflow.
        gamma = math.exp(self._log_gamma)
        return math.exp(index * self._log_gamma + math.log(2.0 / (gamma + 1.0)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"alpha", "max_buckets", "zero", "positive", "negative"}``,
        the stores as ``[index, count]`` pairs in index order."""
        return {
            "alpha": self.alpha,
            "max_buckets": self.max_buckets,
            "zero": self._zero,
            "positive": self._positive.items(),
            "negative": self._negative.items(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sketch:
        """The inverse of :meth:`to_dict`."""
        sketch = cls(float(data["alpha"]), int(data["max_buckets"]))
        sketch._zero = int(data["zero"])
        for store, pairs in (
            (sketch._positive, data["positive"]),
            (sketch._negative, data["negative"]),
        ):
            for index, n in sorted(pairs, reverse=True):
                store.add(int(index), int(n))
        return sketch

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sketch) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable
