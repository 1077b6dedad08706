"""The CLI's shared frame: the Typer app, its root options, the one error boundary, and the
parsing helpers every command uses. Commands live in sibling modules and register on ``app``."""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from actviz._version import __version__
from actviz.cli.console import RichReporter, error
from actviz.errors import ActvizError, ExitCode, UsageError

if TYPE_CHECKING:
    from actviz.command.options import LoadOptions
    from actviz.stats import Thresholds

__all__ = [
    "Terminated",
    "app",
    "boundary",
    "load_options",
    "on_sigterm",
    "pair",
    "reporting",
    "state",
    "thresholds",
    "usage_error",
]

P = ParamSpec("P")
R = TypeVar("R")

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
        bool, typer.Option("--debug", help="Show full tracebacks for errors.")
    ] = False,
) -> None:
    """Draw what a neural network's layers see: one feature-map grid PNG per layer."""
    state["debug"] = debug


def boundary(command: Callable[P, R]) -> Callable[P, R]:
    """Turn expected errors into a one-line message and their exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ActvizError as exc:
            if state["debug"]:
                raise
            error(str(exc))
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt as exc:
            if state["debug"]:
                raise
            terminated = isinstance(exc, Terminated)
            error(f"{'terminated' if terminated else 'interrupted'}{state['progress']}")
            code = ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
            raise typer.Exit(int(code)) from None

    return wrapper


def pair(text: str, option: str, kind: type[float] | type[int]) -> tuple[Any, Any]:
    """Parse ``A,B`` (or ``AxB``) into two numbers, or fail with the option's name."""
    parts = text.replace("x", ",").split(",")
    try:
        first, second = (kind(p.strip()) for p in parts)
    except ValueError:
        raise UsageError(f"{option} takes two numbers like 1,99 or 224,320; got '{text}'") from None
    return first, second


def thresholds(pairs: list[str] | None) -> Thresholds | None:
    """``--threshold name=value`` options -> ``Thresholds``, or None for the defaults."""
    if not pairs:
        return None
    import dataclasses

    from actviz.stats import Thresholds

    known = {f.name for f in dataclasses.fields(Thresholds)}
    values: dict[str, float] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        name = name.strip()
        if name not in known:
            raise UsageError(
                f"--threshold: unknown name '{name}'; use one of {', '.join(sorted(known))}"
            )
        try:
            values[name] = float(text)
        except ValueError:
            raise UsageError(f"--threshold {name} needs a number, e.g. {name}=0.8") from None
    return Thresholds(**values)


def load_options(
    weights: str, device: str, trust_checkpoint: bool, input_size: str | None, in_chans: int
) -> LoadOptions:
    from actviz.command.options import LoadOptions

    return LoadOptions(
        weights=weights,
        device=device,
        trust_checkpoint=trust_checkpoint,
        input_size=pair(input_size, "--input-size", int) if input_size else None,
        in_chans=in_chans,
    )


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
    signal.signal(signal.SIGTERM, on_sigterm)
    reporter = kind(quiet=quiet, status=state)
    try:
        yield reporter
    finally:
        reporter.stop()
