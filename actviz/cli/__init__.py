"""The ``actviz`` command: Typer commands, option declarations, the rich console, and the one
error boundary (in ``boundary``). Importing this package registers every command on ``app``."""

from __future__ import annotations

import os
import sys

from actviz.cli import ablate as ablate
from actviz.cli import atlas as atlas
from actviz.cli import attribute as attribute
from actviz.cli import cam_eval as cam_eval
from actviz.cli import collector
from actviz.cli import commands as commands
from actviz.cli import diff as diff

# isort: split
# Commands register as they are imported, in the order `actviz --help` lists them.
from actviz.cli import top_images as top_images

# isort: split
from actviz.cli import label as label
from actviz.cli import monitor as monitor
from actviz.cli import optimize as optimize
from actviz.cli import sae as sae
from actviz.cli import tcav as tcav
from actviz.cli.boundary import app, usage_error
from actviz.errors import ExitCode

__all__ = ["app", "main"]


def _reflow_help() -> None:
    """Each command's help with every paragraph on one line: Rich keeps a docstring's line
    breaks, which then break sentences in a terminal narrower than the source's lines."""
    import inspect

    for info in app.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


_reflow_help()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors, including those Typer's parser finds, are one
    line and exit 2; ``--help`` keeps its panels."""
    import typer

    if argv is None:  # the process's own command line: it ends with the command
        collector.own_process()
    args = _debug_first(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        # standalone_mode=False hands parser errors to us instead of Typer's multi-line box.
        code = command.main(args or ["--help"], prog_name="actviz", standalone_mode=False)
    except Exception as exc:
        line = usage_error(exc)
        if line is None:
            raise
        sys.exit(line)
    if argv is None:
        collector.at_exit()
    _exit(code if isinstance(code, int) else 0)


def _exit(code: int) -> None:
    """Exit with ``code``; after an interrupt, without the interpreter's teardown.

    With torch loaded, tearing the interpreter down takes a few tenths of a second on a small
    machine (1-2 s when the collector walks torch's objects, see ``collector``), and a user
    who pressed Ctrl-C waits through it. By now every file is written and closed, so after an
    interrupt the process leaves at once. Not with Ray loaded: its exit handlers stop the
    local cluster's processes.
    """
    if code in (ExitCode.INTERRUPTED, ExitCode.TERMINATED) and "ray" not in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _debug_first(args: list[str]) -> list[str]:
    """``--debug`` is an option of ``actviz`` itself; given after the command
    (``actviz run ... --debug``), it is moved before it rather than refused."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end] or args[:1] == ["--debug"]:
        return list(args)
    rest = [a for a in args[:end] if a != "--debug"]
    return ["--debug", *rest, *args[end:]]
