"""Flags over training: what looks wrong in the statistics, from the step it began."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Flag", "FlagTracker"]


@dataclass(frozen=True)
class Flag:
    """Something that went wrong, and the step it began.

    Attributes:
        kind: What it is.
        target: The layer or parameter (``loss`` for a loss spike).
        step: The recorded step it began at.
        message: One line saying what was seen.
    """

    kind: str
    target: str
    step: int
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FlagTracker:
    """Reads step records one at a time, keeping a few numbers per layer, and returns the
    flags that begin at each."""

    def update(self, record: Mapping[str, Any]) -> list[Flag]:
        return []
