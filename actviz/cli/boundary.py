"""The CLI's shared frame: the Typer app, its root options, the one error boundary, and the
progress frame of long commands. Commands live in sibling modules and register on ``app``."""

from __future__ import annotations

import contextlib
import functools
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Annotated, Any, ParamSpec, Protocol, TextIO, TypeVar

import typer

from actviz._version import __version__
from actviz.cli.console import RichReporter, error, warn
from actviz.errors import ActvizError, ExitCode, command_line_spelling

__all__ = [
    "Terminated",
    "app",
    "boundary",
    "on_sigterm",
    "reporting",
    "state",
    "stopping",
    "usage_error",
]

P = ParamSpec("P")
R = TypeVar("R")


class _Stops(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Stops)

app = typer.Typer(
    name="actviz",
    help="Draw what a neural network's layers see: one feature-map grid PNG per layer.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="rich",
)
state: dict[str, Any] = {"debug": False, "progress": ""}


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so the same cleanup runs."""


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def _version(value: bool) -> None:
    if value:
        typer.echo(f"actviz {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show full tracebacks for errors (the exit code stays the same)."
        ),
    ] = False,
) -> None:
    """Draw what a neural network's layers see: one feature-map grid PNG per layer."""
    state["debug"] = debug


def boundary(command: Callable[P, R]) -> Callable[P, R]:
    """Turn expected errors into a one-line message and their exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        # Messages name options as this command line spells them (--k, not k=).
        with command_line_spelling():
            try:
                with _library_warnings():
                    return command(*args, **kwargs)
            except ActvizError as exc:
                _traceback()
                error(str(exc))
                raise typer.Exit(int(exc.exit_code)) from None
            except KeyboardInterrupt as exc:
                _traceback()
                terminated = isinstance(exc, Terminated)
                error(f"{'terminated' if terminated else 'interrupted'}{state['progress']}")
                code = ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
                raise typer.Exit(int(code)) from None

    return wrapper


def _traceback() -> None:
    """With ``--debug``, the full traceback of the error being handled, on stderr; the exit
    code stays the error's (2 for a usage error), as without it."""
    if state["debug"]:
        import traceback

        traceback.print_exc()


@contextlib.contextmanager
def _library_warnings() -> Iterator[None]:
    """actviz's own warnings (``warnings.warn`` with one of its categories, such as
    preprocessing defaults) as one ``warning:`` line each on stderr, each message once;
    other libraries' warnings are shown as Python shows them."""
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if category.__module__.startswith("actviz."):
            warn(str(message))
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.filterwarnings("once", module=r"actviz\.")
        warnings.showwarning = show
        yield


def usage_error(exc: BaseException) -> int | None:
    """Print a parser's usage error as one line and return its exit code (2); None when
    ``exc`` is not a parser error."""
    exit_code = getattr(exc, "exit_code", None)
    format_message = getattr(exc, "format_message", None)
    if not isinstance(exit_code, int) or not callable(format_message):
        return None
    ctx = getattr(exc, "ctx", None)
    where = getattr(ctx, "command_path", "actviz")
    error(f"{format_message()} (see '{where} --help')")
    return exit_code


@contextlib.contextmanager
def reporting(quiet: bool, kind: type[RichReporter] = RichReporter) -> Iterator[RichReporter]:
    """A long command's progress bar, stopped however the block ends; SIGTERM stops the
    command like Ctrl-C, so the same cleanup and message run."""
    with stopping(kind(quiet=quiet, status=state)) as reporter:
        yield reporter


@contextlib.contextmanager
def stopping(bar: S) -> Iterator[S]:
    """``bar``, stopped however the block ends; SIGTERM stops the command like Ctrl-C."""
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield bar
    finally:
        bar.stop()
