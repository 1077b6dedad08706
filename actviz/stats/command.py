"""``actviz stats`` as a function: a run that draws no picture and takes no gradient, for
per-layer statistics and anomaly flags only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.command.options import COMMON_GROUPS, KeywordError, from_flat
from actviz.run.command import run
from actviz.run.options import ALIASES, GROUPS, DrawOptions, GradientOptions, RunOptions
from actviz.run.result import RunResult

if TYPE_CHECKING:
    from torch import nn

    from actviz.command.progress import Reporter

__all__ = ["stats"]

#: ``stats``' own keywords, as the command line names them; the load and execution groups'
#: fields are its keywords too.
_OWN = ("layers", "out", "frames", "flow_updates", "report", "score_threshold", "thresholds")


def stats(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: RunOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> RunResult:
    """Per-layer statistics and anomaly flags only: no pictures, so it is fast.

    Writes ``stats.json``, ``stats.csv``, ``stats.parquet`` and ``manifest.json`` (and the
    report ``index.html`` with ``report=True``), as ``actviz stats`` does.

    Args:
        model: As for :func:`actviz.run`: a model name, ``package.module:factory`` /
            ``path/to/file.py:factory``, or an ``nn.Module``.
        inputs: An image file or folder, or a list of them (folders walked recursively).
        options: A run's options (:class:`~actviz.run.options.RunOptions`); their drawing and
            gradient groups are set aside: stats draws no picture and takes no gradient.
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, the command line's options by their flat names:
            ``layers``, ``out``, ``frames``, ``flow_updates``, ``report`` (False unless
            given), ``score_threshold``, ``thresholds``, and every field of the load and
            execution groups (``weights``, ``device``, ``batch_size``, ``resume``, ...).

    Returns:
        What was measured and written, as :func:`actviz.run` returns it.

    Raises:
        ActvizError: As :func:`actviz.run` raises. A drawing or gradient option given as a
            keyword (``cam=True``), or an unknown one, is a
            :class:`~actviz.command.options.KeywordError`.
    """
    taken = {*_OWN, *_fields(COMMON_GROUPS.values())}
    drawing = sorted(k for k in keywords if k not in taken and k in _run_keywords())
    if drawing:
        raise KeywordError(
            f"stats() draws no picture and takes no gradient: drop {', '.join(drawing)} "
            "(actviz.run takes them)"
        )
    if options is None:
        keywords = {"report": False, **keywords}
    opts = from_flat(RunOptions, COMMON_GROUPS, keywords, caller="stats", given=options)
    opts = dataclasses.replace(opts, draw=DrawOptions(grids=False), gradients=GradientOptions())
    return run(model, inputs, opts, reporter=reporter)


def _run_keywords() -> set[str]:
    """Every keyword :func:`actviz.run` takes."""
    top = set(_fields([RunOptions])) - set(GROUPS)
    return top | set(ALIASES) | set(_fields(GROUPS.values()))


def _fields(classes: Iterable[type[Any]]) -> list[str]:
    """The field names of the dataclasses ``classes``."""
    return [f.name for cls in classes for f in dataclasses.fields(cls)]
