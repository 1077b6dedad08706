"""``actviz report LOGDIR``: the HTML page of a training log, written beside it.

Reads the log (:func:`~actviz.monitor.log.read_log`), replays the flags over its step records
(:func:`~actviz.monitor.flags.replay`, the code the live watch runs), and renders
:func:`actviz.report.training.training_page`. Safe to run while training goes on: the log is
only read, the page written under a temporary name and renamed.
"""

from __future__ import annotations

import os
from pathlib import Path

from actviz.monitor.flags import replay
from actviz.monitor.log import read_log
from actviz.report.training import training_page

__all__ = ["REPORT_NAME", "build_training_report"]

#: The page's file name inside the log's folder.
REPORT_NAME = "report.html"


def build_training_report(logdir: str | Path, out: str | Path | None = None) -> Path:
    """Write the HTML report of the training log in ``logdir``.

    Args:
        logdir: The ``out`` folder of :func:`actviz.watch` (or its ``watch.jsonl``).
        out: Where to write the page; default ``LOGDIR/report.html``. Pictures stay in the
            log's folder and are linked relative to the page, wherever it is written.

    Returns:
        The page's path.

    Raises:
        OutputError: When there is no log, or the page cannot be written.
    """
    from actviz.output import write_bytes

    log = read_log(logdir)
    folder = log.path.parent
    target = Path(out) if out is not None else folder / REPORT_NAME
    # The probe's pictures are named relative to the log's folder; the page links them from
    # where it is.
    back = Path(os.path.relpath(folder.resolve(), target.resolve().parent))
    flags = [flag.as_dict() for flag in replay(log.steps)]
    strips: dict[str, list[dict[str, object]]] = {}
    for record in log.probes:
        ranges = record.get("ranges") or {}
        for layer, file in (record.get("files") or {}).items():
            linked = (back / str(file)).as_posix()
            frame = {"step": record.get("step"), "file": linked, "range": ranges.get(layer)}
            strips.setdefault(str(layer), []).append(frame)
    page = training_page(
        log.start,
        log.steps,
        log.nonfinite,
        flags,
        end=log.end,
        filmstrips=[{"layer": layer, "frames": frames} for layer, frames in strips.items()],
        runs=log.runs,
        torn=log.torn,
        source=str(log.path),
    )
    write_bytes(target, page)
    return target
