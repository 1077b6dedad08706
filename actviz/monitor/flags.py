"""Flags over training: what looks wrong in the statistics, named with the step it began.

:class:`FlagTracker` reads step records one at a time (live in :class:`~actviz.monitor.Watch`,
or replayed from a log by the report: the same code, so both say the same), keeping a few
numbers per layer, never the whole history. A condition that holds at a recorded step and did
not at the ones before gives one :class:`Flag`; while it keeps holding, nothing more; when it
clears for three records in a row and comes back, a new one.

The kinds, and why these thresholds:

- ``vanishing_grad``: a layer whose output gradient, per value (its norm over the square root
  of its size, so wide and narrow layers compare), is 1000x below the median layer of the
  step: that part of the network barely learns.
- ``exploding_grad``: a layer's output gradient norm, or on ``(total)`` the total gradient
  norm before clipping, 10x above the median of its recorded steps before: a growth step over
  step that clipping hides. (Against its own past, not against the other layers: a
  classifier's logits always get far larger gradients per value than its first layers.)
- ``dead_units``: a layer whose outputs are at least 90 % zeros, up by 20 points or more
  since its first record: ReLU units dying as training goes on.
- ``update_ratio_high`` / ``update_ratio_low``: the median over parameters of
  ``|update| / |weight|`` more than 10x away from about 1e-3, the usual healthy value: the
  learning rate is too high (weights churn) or too low (nothing moves).
- ``loss_spike``: a loss 3x above the median of the recorded steps before it.
- ``nonfinite``: a layer whose output held NaN or Inf, or (target ``loss``) a loss that was
  NaN or Inf, with what made it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FLAG_KINDS", "Flag", "FlagTracker", "replay"]

FLAG_KINDS = (
    "nonfinite",
    "exploding_grad",
    "vanishing_grad",
    "dead_units",
    "update_ratio_high",
    "update_ratio_low",
    "loss_spike",
)

_LAYER_SPREAD = 1000.0  # how far from the median layer a gradient per value must be
_GROWTH = 10.0  # total gradient norm against the median of the steps before
_DEAD = 0.9  # fraction of zeros
_DEAD_RISE = 0.2  # rise in that fraction since the first record
_HEALTHY_RATIO = 1e-3
_RATIO_SPREAD = 10.0
_SPIKE = 3.0
_HISTORY = 20  # recorded steps the running medians look back over
_MIN_HISTORY = 3
_CLEAR_AFTER = 3  # clean records in a row that end a flag


@dataclass(frozen=True)
class Flag:
    """Something that looks wrong, and the step it began.

    Attributes:
        kind: One of :data:`FLAG_KINDS`.
        target: The layer or parameter, ``(total)``, ``(median)`` or ``loss``.
        step: The recorded step it began at.
        message: One line saying what was seen.
    """

    kind: str
    target: str
    step: int
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


class FlagTracker:
    """Reads step records in step order; :meth:`update` returns the flags that begin there."""

    def __init__(self) -> None:
        self._active: set[tuple[str, str]] = set()
        self._clean: dict[tuple[str, str], int] = {}
        self._first_zero: dict[str, float] = {}
        self._totals: deque[float] = deque(maxlen=_HISTORY)
        self._losses: deque[float] = deque(maxlen=_HISTORY)
        self._layer_grads: dict[str, deque[float]] = {}

    def update(self, record: Mapping[str, Any]) -> list[Flag]:
        """The flags whose condition holds at this record and did not at the one before."""
        step = int(record.get("step", 0))
        holding: dict[tuple[str, str], str] = {}
        self._layers(record.get("layers") or {}, holding)
        self._total(_finite(record.get("grad_norm")), holding)
        self._ratios(record.get("params") or {}, holding)
        self._loss(_finite(record.get("loss")), holding)
        note = record.get("loss_nonfinite")
        if isinstance(note, Mapping):
            holding[("nonfinite", "loss")] = str(note.get("message") or "the loss was not finite")
        new = [
            Flag(kind, target, step, message)
            for (kind, target), message in holding.items()
            if (kind, target) not in self._active
        ]
        # A flag ends after a few clean records in a row, so a value hovering at a threshold
        # is one flag, not one every other step.
        for key in self._active - set(holding):
            self._clean[key] = self._clean.get(key, 0) + 1
            if self._clean[key] >= _CLEAR_AFTER:
                self._active.discard(key)
                del self._clean[key]
        for key in holding:
            self._active.add(key)
            self._clean.pop(key, None)
        return new

    def _layers(self, layers: Mapping[str, Any], holding: dict[tuple[str, str], str]) -> None:
        per_value: dict[str, float] = {}
        for name, row in layers.items():
            if (row.get("nan") or 0) + (row.get("inf") or 0) > 0:
                holding[("nonfinite", name)] = (
                    f"{row.get('nan') or 0} NaN and {row.get('inf') or 0} Inf in the output"
                )
            zeros = _finite(row.get("zero_frac"))
            if zeros is not None:
                first = self._first_zero.setdefault(name, zeros)
                if zeros >= _DEAD and zeros - first >= _DEAD_RISE:
                    holding[("dead_units", name)] = (
                        f"{zeros:.0%} of the outputs are zero, up from {first:.0%}"
                    )
            grad = _finite(row.get("grad_norm"))
            size = math.prod(row.get("shape") or [0])
            if grad is not None and size > 0:
                per_value[name] = grad / math.sqrt(size)
                self._growth(name, grad, holding)
        positive = [v for v in per_value.values() if v > 0]
        if len(positive) < 3:
            return
        median = statistics.median(positive)
        for name, value in per_value.items():
            if value < median / _LAYER_SPREAD:
                holding[("vanishing_grad", name)] = (
                    f"gradient per value {value:.3g}, {median / max(value, 1e-45):.3g}x below "
                    f"the median layer ({median:.3g})"
                )

    def _growth(self, name: str, grad: float, holding: dict[tuple[str, str], str]) -> None:
        history = self._layer_grads.setdefault(name, deque(maxlen=_HISTORY))
        if len(history) >= _MIN_HISTORY:
            median = statistics.median(history)
            if median > 0 and grad > _GROWTH * median:
                holding[("exploding_grad", name)] = (
                    f"gradient norm {grad:.3g}, {grad / median:.3g}x the median of the steps "
                    f"before ({median:.3g})"
                )
        history.append(grad)

    def _total(self, total: float | None, holding: dict[tuple[str, str], str]) -> None:
        if total is None:
            return
        if len(self._totals) >= _MIN_HISTORY:
            median = statistics.median(self._totals)
            if median > 0 and total > _GROWTH * median:
                holding[("exploding_grad", "(total)")] = (
                    f"total gradient norm {total:.3g}, {total / median:.3g}x the median of the "
                    f"steps before ({median:.3g})"
                )
        self._totals.append(total)

    def _ratios(self, params: Mapping[str, Any], holding: dict[tuple[str, str], str]) -> None:
        ratios = [
            r
            for r in (_finite((row or {}).get("update_ratio")) for row in params.values())
            if r is not None and r > 0
        ]
        if not ratios:
            return
        median = statistics.median(ratios)
        if median > _HEALTHY_RATIO * _RATIO_SPREAD:
            holding[("update_ratio_high", "(median)")] = (
                f"median update/weight ratio {median:.3g}, far above about 1e-3: the learning "
                "rate may be too high"
            )
        elif median < _HEALTHY_RATIO / _RATIO_SPREAD:
            holding[("update_ratio_low", "(median)")] = (
                f"median update/weight ratio {median:.3g}, far below about 1e-3: the learning "
                "rate may be too low"
            )

    def _loss(self, loss: float | None, holding: dict[tuple[str, str], str]) -> None:
        if loss is None:
            return
        if len(self._losses) >= _MIN_HISTORY:
            median = statistics.median(self._losses)
            if median > 0 and loss > _SPIKE * median:
                holding[("loss_spike", "loss")] = (
                    f"loss {loss:.4g}, {loss / median:.3g}x the median of the steps before "
                    f"({median:.4g})"
                )
        self._losses.append(loss)


def replay(records: Iterable[Mapping[str, Any]]) -> list[Flag]:
    """Every flag of a run, from its step records in step order."""
    tracker = FlagTracker()
    return [flag for record in records for flag in tracker.update(record)]
