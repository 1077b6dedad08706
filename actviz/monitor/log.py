"""The training log: an append-only JSON Lines file, one object per line.

The writer appends one line per record to the output package's :class:`~actviz.output.Journal`
and flushes it at once, so what was written survives a crash or a ``kill -9`` of the training
process (the operating system holds it). A process killed in the middle of a write leaves a
torn last line; the reader ignores it, and the writer of a later run starts on a fresh line.
Reading costs one pass over the file, so the report can be built while training goes on.

The schema is in docs/training.md: a ``start`` record per run, a ``step`` record per recorded
step, a ``nonfinite`` record when a NaN or Inf appears somewhere new, an ``end`` record when
the block exits.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.cards import log_state, training_card
from actviz.errors import OutputError
from actviz.output import Journal

__all__ = ["LOG_NAME", "LogWriter", "TrainingLog", "clean", "read_log"]

#: The log's file name inside the ``out`` folder.
LOG_NAME = "watch.jsonl"


def clean(value: Any) -> Any:
    """``value`` with every NaN or infinite float turned into None: strict JSON has neither,
    and the counts beside each statistic say how many there were."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


class LogWriter:
    """Appends records to ``folder/watch.jsonl``, one line each, handed to the operating
    system at once."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOG_NAME
        self._journal: Journal | None = Journal(self.path, error=_log_error)
        self._journal.open()

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it to the operating system."""
        if self._journal is None:
            raise ValueError("the log is closed")
        try:
            # Nearly every record is finite: encode it as it is, and walk it only when not.
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError):  # a NaN or Inf; a key JSON does not take as it is
            line = json.dumps(clean(record), separators=(",", ":"), allow_nan=False)
        self._journal.append(line.encode("utf-8") + b"\n")

    def close(self) -> None:
        if self._journal is not None:
            journal, self._journal = self._journal, None
            journal.close()


def _log_error(path: Path, exc: OSError) -> OutputError:
    return OutputError(
        f"cannot write the training log {path}: {exc.strerror or exc}; pass another out= folder"
    )


@dataclass
class TrainingLog:
    """What a log holds: the latest run's records, by kind.

    Attributes:
        path: The file read.
        start: The latest run's ``start`` record (empty for a log without one).
        steps: Its ``step`` records, in step order.
        nonfinite: Its ``nonfinite`` records, earliest first.
        probes: Its ``probe`` records (the files of the probe batch's pictures).
        end: Its ``end`` record, or None while the run goes on (or after a crash).
        runs: How many runs the file holds (each ``watch`` block appends one).
        torn: Lines that could not be read (a torn last line after a crash).
    """

    path: Path
    start: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    nonfinite: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    runs: int = 0
    torn: int = 0

    @property
    def first_nonfinite(self) -> dict[str, Any] | None:
        """The earliest non-finite origin of the run, or None."""
        return self.nonfinite[0] if self.nonfinite else None

    def __repr__(self) -> str:

        return training_card(log_state(self), name="TrainingLog").text()

    def _repr_html_(self) -> str:

        return training_card(log_state(self)).html()


def read_log(path: str | os.PathLike[str]) -> TrainingLog:
    """Read a training log (a ``watch.jsonl`` file, or the folder that holds one).

    Only the latest run is kept when several were appended to one file. Lines that are not
    JSON objects (a torn last line) are skipped and counted.

    Raises:
        OutputError: When there is no log there.
    """
    target = Path(path)
    if target.is_dir():
        target = target / LOG_NAME
    try:
        target.stat()
    except OSError as exc:
        raise OutputError(
            f"no training log at {target} ({exc.strerror or exc}); pass the out= folder of "
            "actviz.watch"
        ) from exc
    log = TrainingLog(target)
    for _, line in Journal(target, error=_read_error).lines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log.torn += 1
            continue
        if not isinstance(record, dict):
            log.torn += 1
            continue
        _add(log, record)
    log.steps.sort(key=lambda r: int(r.get("step", 0)))
    return log


def _read_error(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"cannot read the training log {path}: {exc.strerror or exc}")


def _add(log: TrainingLog, record: dict[str, Any]) -> None:
    kind = record.get("kind")
    if kind == "start":
        log.runs += 1
        log.start, log.steps, log.nonfinite, log.probes, log.end = record, [], [], [], None
    elif kind == "step":
        log.steps.append(record)
    elif kind == "nonfinite":
        log.nonfinite.append(record)
    elif kind == "probe":
        log.probes.append(record)
    elif kind == "end":
        log.end = record
