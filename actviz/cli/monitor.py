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
        typer.Option("--out", "-o", help="Where to write the page [default: LOGDIR/report.html]."),
    ] = None,
) -> None:
    """Render a training log into an HTML report (also while training runs)."""
    from actviz.monitor.report import build_training_report

    page = build_training_report(logdir, out)
    out_console.print(str(page), markup=False)
