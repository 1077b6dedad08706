"""``actviz report LOGDIR``: the HTML page of a training log written by ``actviz.watch``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from actviz.cli.boundary import app, boundary
from actviz.cli.console import out_console

__all__ = ["report"]


@app.command()
@boundary
def report(
    logdir: Annotated[
        Path,
        typer.Argument(
            help="The out= folder of actviz.watch (or its watch.jsonl).", show_default=False
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Where to write the page \\[default: LOGDIR/report.html]."
        ),
    ] = None,
) -> None:
    """Render a training log into an HTML report (also while training runs)."""
    from actviz.monitor.report import build_training_report

    _check_log(logdir)
    page = build_training_report(logdir, out)
    out_console.print(str(page), markup=False)


def _check_log(logdir: Path) -> None:
    """Refuse a file that holds no record actviz.watch writes (garbage, another tool's
    JSON lines, an empty file), before an empty page is written for it."""
    from actviz.errors import OutputError
    from actviz.monitor.log import read_log

    log = read_log(logdir)
    if log.runs or log.steps or log.nonfinite or log.probes or log.end is not None:
        return
    unread = f" ({log.torn} unreadable line(s))" if log.torn else ""
    raise OutputError(
        f"{log.path} holds no actviz.watch records{unread}; pass the out= folder of a "
        "training run that actviz.watch logged"
    )
