"""The end of a command: its result on stdout (JSON or words), the summary on stderr unless
quiet, then the exit code that says whether images failed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from actviz.cli.console import error, out_console
from actviz.errors import ExitCode

__all__ = ["exit_on_failed", "finish", "print_outcome"]


def print_outcome(
    document: Path | Mapping[str, Any],
    show: Callable[[], None],
    summary: Callable[[], None] | None = None,
    *,
    as_json: bool,
    quiet: bool = False,
) -> None:
    """``document`` as JSON (a written record, or the data itself) or ``show()``; then
    ``summary()`` unless ``quiet``."""
    if as_json:
        if isinstance(document, Path):
            out_console.print_json(document.read_text(encoding="utf-8"))
        else:
            out_console.print_json(data=document)
    else:
        show()
    if summary is not None and not quiet:
        summary()


def exit_on_failed(
    failed: int, *, none_done: bool, verb: str = "read", made: Path | None = None
) -> None:
    """Exit ERROR, said, when no image could be ``verb`` (read, scored); PARTIAL when some
    failed; return when none did. ``made``: the output folder, when this command created it:
    with nothing done, what it holds is only the failed run's records, and it goes again (a
    next run without ``--out`` then takes it rather than moving on to ``-2``)."""
    if none_done:
        if made is not None:
            from actviz.output import remove_made

            remove_made(made)
        error(f"no image could be {verb} ({failed} failed); see messages above")
        raise typer.Exit(int(ExitCode.ERROR))
    if failed:
        raise typer.Exit(int(ExitCode.PARTIAL))


def finish(
    document: Path | Mapping[str, Any],
    show: Callable[[], None],
    summary: Callable[[], None],
    *,
    as_json: bool,
    quiet: bool,
    failed: int,
    none_done: bool,
    verb: str = "read",
    made: Path | None = None,
) -> None:
    """:func:`print_outcome`, then :func:`exit_on_failed`; with nothing done, only the latter
    (no "wrote" line for files that are then removed, see ``made`` there)."""
    if not none_done:
        print_outcome(document, show, summary, as_json=as_json, quiet=quiet)
    exit_on_failed(failed, none_done=none_done, verb=verb, made=made)
