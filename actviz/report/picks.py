"""Which images of a run get a report page of their own, picked as the images finish.

A run's report links a bounded set of images (:attr:`actviz.report.ReportImages.linked`):
the first :data:`~actviz.report.pages.LINKED_FIRST` images drawn, the worst images of each
kind of flag (the ones ``stats.json`` lists, so that its lists link to pages), and the first
:data:`~actviz.report.pages.LISTED` failures. :class:`LinkedPicks` keeps exactly those
records while a run goes, whatever order the images finish in, and lets every other go.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from actviz.report.pages import LINKED_FIRST, LISTED, WORST_LINKED

__all__ = ["LinkedPicks"]

_OK = ("ok", "reused")


class Flag(Protocol):
    """What the picks read of an ``actviz.stats.Flag``."""

    @property
    def kind(self) -> str: ...

    @property
    def severity(self) -> float: ...


class LinkedPicks:
    """The records of the images a report links, held while a run goes; bounded.

    Args:
        first: How many of the first drawn images (in image order) to keep.
        worst: How many images to keep for each kind of flag: the most severe, ties by image
            key, as :class:`actviz.stats.RunningStats` ranks its ``"worst"`` lists.
        failures: How many of the first failed images to keep.
    """

    def __init__(
        self, *, first: int = LINKED_FIRST, worst: int = WORST_LINKED, failures: int = LISTED
    ) -> None:
        self._sizes = (first, worst, failures)
        self._records: dict[int, Mapping[str, Any]] = {}  # order -> record, while picked
        self._first: list[int] = []
        self._failures: list[int] = []
        # kind -> (-severity, image key, order), most severe first.
        self._worst: dict[str, list[tuple[float, str, int]]] = {}

    def add(self, order: int, record: Mapping[str, Any], flags: Iterable[Flag] = ()) -> None:
        """One finished image.

        Args:
            order: Its place in the run's input order (from 0), which the report follows.
            record: Its full record (``actviz.run.manifest.image_record``), with ``"flags"``
                and ``"first_nonfinite"`` when statistics were computed.
            flags: Its flags, with their severity (:func:`actviz.stats.flag_anomalies`).
        """
        first, worst, failures = self._sizes
        dropped: list[int] = []
        if record.get("status") == "failed":
            dropped += _keep_smallest(self._failures, order, failures)
        elif record.get("status") in _OK:
            dropped += _keep_smallest(self._first, order, first)
            key = str(record.get("out_dir", ""))
            for kind, severity in _most_severe(flags).items():
                held = self._worst.setdefault(kind, [])
                entry = (-severity, key, order)
                if len(held) < worst or entry < held[-1]:
                    bisect.insort(held, entry)
                    dropped += [o for _, _, o in held[worst:]]
                    del held[worst:]
                else:
                    dropped.append(order)
        self._records[order] = record
        for gone in {*dropped, order}:
            if not self._holds(gone):
                self._records.pop(gone, None)

    def linked(self) -> list[Mapping[str, Any]]:
        """The picked records, in image order: what :attr:`ReportImages.linked` takes."""
        return [self._records[order] for order in sorted(self._records)]

    def _holds(self, order: int) -> bool:
        if _contains(self._first, order) or _contains(self._failures, order):
            return True
        return any(o == order for held in self._worst.values() for _, _, o in held)


def _keep_smallest(held: list[int], order: int, size: int) -> list[int]:
    """Put ``order`` among the ``size`` smallest held; what no longer fits."""
    bisect.insort(held, order)
    dropped = held[size:]
    del held[size:]
    return dropped


def _contains(ordered: list[int], value: int) -> bool:
    at = bisect.bisect_left(ordered, value)
    return at < len(ordered) and ordered[at] == value


def _most_severe(flags: Iterable[Flag]) -> dict[str, float]:
    """Each kind's most severe flag of one image, as ``RunningStats`` ranks them (an
    undefined severity counts as 0)."""
    found: dict[str, float] = {}
    for flag in flags:
        severity = 0.0 if math.isnan(flag.severity) else flag.severity
        if flag.kind not in found or severity > found[flag.kind]:
            found[flag.kind] = severity
    return found
