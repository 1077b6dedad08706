"""The ``actviz`` command: parse options, call the library, print with rich.

This is the one error boundary: :class:`~actviz.errors.ActvizError` becomes a one-line message on
stderr and its exit code (a traceback only with ``--debug``). Torch is imported inside the
commands, never here, so ``actviz --help`` is instant.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from actviz import __version__
from actviz.errors import ActvizError, ExitCode, UsageError

if TYPE_CHECKING:
    from actviz.api import ImageResult, LayerListing, RunResult

__all__ = ["app", "main"]

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
out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
_state: dict[str, Any] = {"debug": False, "progress": ""}


class _Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so the same cleanup runs."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


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
    _state["debug"] = debug


def _boundary(command: Callable[P, R]) -> Callable[P, R]:
    """Turn expected errors into a one-line message and their exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ActvizError as exc:
            if _state["debug"]:
                raise
            _error(str(exc))
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt as exc:
            if _state["debug"]:
                raise
            terminated = isinstance(exc, _Terminated)
            _error(f"{'terminated' if terminated else 'interrupted'}{_state['progress']}")
            code = ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
            raise typer.Exit(int(code)) from None

    return wrapper


def _error(message: str) -> None:
    # One line, whatever a library or a user-supplied name put in the message.
    err_console.print(Text.assemble(("error: ", "bold red"), " ".join(message.split())))


def _warn(message: str) -> None:
    err_console.print(Text.assemble(("warning: ", "bold yellow"), message))


LayersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--layers",
        "-l",
        help=(
            "Which layers: a type alias (conv, relu, bn, norm, pool, linear, act, attn), a "
            "class name (Conv2d), a glob (layer4.*), re:REGEX, an exact name, all, or !TERM "
            "to exclude. Comma-separate or repeat."
        ),
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout instead.")
]


@app.command()
@_boundary
def run(
    model: Annotated[str, typer.Argument(help="A torchvision model name, e.g. resnet34.")],
    inputs: Annotated[
        list[Path], typer.Argument(help="Image files and/or folders.", show_default=False)
    ],
    layers: LayersOption = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output folder.", rich_help_panel="Output")
    ] = Path("actviz-out"),
    weights: Annotated[
        str,
        typer.Option(
            "--weights",
            "-w",
            help=(
                "auto (pretrained if cached or downloadable, else random with a warning), "
                "default or an enum name such as IMAGENET1K_V2 (required), none (random), "
                "or a state_dict checkpoint file (.pt/.pth/.safetensors)."
            ),
            rich_help_panel="Model",
        ),
    ] = "auto",
    device: Annotated[
        str,
        typer.Option(
            "--device", "-d", help="auto, cpu, cuda, cuda:N or mps.", rich_help_panel="Model"
        ),
    ] = "auto",
    capture: Annotated[
        Literal["output", "input", "both"],
        typer.Option(
            "--capture",
            help="Draw each layer's output, its input (forward pre-hook), or both.",
            rich_help_panel="Layers",
        ),
    ] = "output",
    layout: Annotated[
        Literal["auto", "nchw", "nhwc", "tokens"],
        typer.Option(
            "--layout",
            help="How outputs are read: auto, or force nchw, nhwc (channels-last) or tokens.",
            rich_help_panel="Layers",
        ),
    ] = "auto",
    max_channels: Annotated[
        int,
        typer.Option(
            "--channels",
            "--max-channels",
            "-c",
            min=0,
            help="Channels drawn per grid at most (0 = all).",
            rich_help_panel="Grid",
        ),
    ] = 64,
    sort: Annotated[
        Literal["index", "mean", "max", "std"],
        typer.Option(
            "--sort",
            help="Which channels when capped: index order, or the top ones by mean, max or std.",
            rich_help_panel="Grid",
        ),
    ] = "index",
    norm: Annotated[
        Literal["channel", "layer", "shared"],
        typer.Option(
            "--norm",
            help=(
                "Scale per channel, per layer, or shared: one scale per layer across every "
                "image of the run, so images compare (costs a second pass)."
            ),
            rich_help_panel="Grid",
        ),
    ] = "channel",
    clip: Annotated[
        str | None,
        typer.Option(
            "--clip",
            metavar="LO,HI",
            help="Clip to these percentiles before scaling, e.g. 1,99.",
            rich_help_panel="Grid",
        ),
    ] = None,
    cmap: Annotated[
        str | None,
        typer.Option(
            "--cmap",
            help="Any matplotlib colormap [default: viridis, or RdBu_r centred on 0 for signed].",
            rich_help_panel="Grid",
        ),
    ] = None,
    overlay: Annotated[
        bool,
        typer.Option(
            "--overlay",
            help="Also write each layer's mean map over the input: <NN>_<layer>_overlay.png.",
            rich_help_panel="Grid",
        ),
    ] = False,
    overlay_channel: Annotated[
        int | None,
        typer.Option(
            "--overlay-channel",
            min=0,
            help="Overlay this channel instead of the mean.",
            rich_help_panel="Grid",
        ),
    ] = None,
    save_tensors: Annotated[
        Literal["npy", "safetensors"] | None,
        typer.Option(
            "--save-tensors",
            help="Also save each raw activation beside its PNG.",
            rich_help_panel="Output",
        ),
    ] = None,
    png_compression: Annotated[
        int,
        typer.Option(
            "--png-compression",
            min=0,
            max=9,
            help="zlib level for the PNGs: 1 is fast, 9 is smallest.",
            rich_help_panel="Output",
        ),
    ] = 1,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size", "-b", min=1, help="Images per forward pass.", rich_help_panel="Speed"
        ),
    ] = 8,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "-j",
            min=0,
            help="Decoding processes (0: one background thread).",
            rich_help_panel="Speed",
        ),
    ] = 0,
    amp: Annotated[
        bool,
        typer.Option(
            "--amp",
            help="Autocast the forward (bfloat16 on CPU, float16 on CUDA); drawn in float32.",
            rich_help_panel="Speed",
        ),
    ] = False,
    channels_last: Annotated[
        bool,
        typer.Option(
            "--channels-last", help="Channels-last memory format.", rich_help_panel="Speed"
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Finish an earlier run in OUT: skip images it completed with the same settings.",
            rich_help_panel="Output",
        ),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace an earlier run's outputs in OUT.", rich_help_panel="Output"
        ),
    ] = False,
    trust_checkpoint: Annotated[
        bool,
        typer.Option(
            "--trust-checkpoint",
            help="Load a checkpoint that needs full unpickling: this runs code from the file.",
            rich_help_panel="Model",
        ),
    ] = False,
    input_size: Annotated[
        str | None,
        typer.Option(
            "--input-size",
            metavar="H,W",
            help="Model input size, for models that do not take 224 x 224.",
            rich_help_panel="Model",
        ),
    ] = None,
    in_chans: Annotated[
        Literal[1, 3],
        typer.Option(
            "--in-chans",
            help="Input channels the model takes: 3 (RGB) or 1 (greyscale).",
            rich_help_panel="Model",
        ),
    ] = 3,
    as_json: JsonOption = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or summary on stderr.")
    ] = False,
) -> None:
    """Run images through MODEL and write one feature-map grid PNG per selected layer.

    Writes OUT/<image>/<NN>_<layer>.png and OUT/manifest.json.
    """
    from actviz.api import run as run_pipeline

    signal.signal(signal.SIGTERM, _on_sigterm)
    reporter = _RichReporter(quiet=quiet)
    try:
        result = run_pipeline(
            model,
            inputs,
            layers=layers or None,
            out=out,
            weights=weights,
            device=device,
            capture=capture,
            max_channels=max_channels,
            order=sort,
            norm=norm,
            clip=_pair(clip, "--clip", float) if clip else None,
            cmap=cmap,
            layout=layout,
            overlay=overlay or overlay_channel is not None,
            overlay_channel=overlay_channel,
            save_tensors=save_tensors,
            trust_checkpoint=trust_checkpoint,
            input_size=_pair(input_size, "--input-size", int) if input_size else None,
            in_chans=in_chans,
            png_compression=png_compression,
            batch_size=batch_size,
            workers=workers,
            resume=resume,
            overwrite=overwrite,
            amp=amp,
            channels_last=channels_last,
            reporter=reporter,
        )
    finally:
        reporter.stop()
    if as_json:
        out_console.print_json(result.manifest.read_text(encoding="utf-8"))
    else:
        _print_run(result)
    if not quiet:
        _print_summary(result)
    if result.failed:
        ok = len(result.images) - len(result.failed)
        if ok == 0:
            _error(f"no image could be read ({len(result.failed)} failed); see messages above")
            raise typer.Exit(int(ExitCode.ERROR))
        raise typer.Exit(int(ExitCode.PARTIAL))


@app.command("list-layers")
@_boundary
def list_layers(
    model: Annotated[str, typer.Argument(help="A torchvision model name, e.g. resnet34.")],
    layers: LayersOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every module of MODEL with its output shape; mark what --layers selects.

    Shapes come from a forward on the meta device: no weights are loaded or downloaded.
    """
    from actviz.api import list_layers as list_model_layers

    listing = list_model_layers(model, layers=layers or None)
    if as_json:
        out_console.print_json(data=_listing_json(listing))
        return
    _print_listing(listing)


@app.command()
@_boundary
def models(
    pattern: Annotated[
        str | None, typer.Argument(help="Glob (resnet*) or substring to filter by.")
    ] = None,
    include_all: Annotated[
        bool,
        typer.Option("--all", help="Also list detection, video and other model families."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List torchvision model names that actviz can run."""
    from actviz.models import list_model_names

    names = list_model_names(pattern, include_all=include_all)
    if as_json:
        out_console.print_json(data=names)
        return
    if not names:
        _warn(f"no model name matches '{pattern}'")
        raise typer.Exit(int(ExitCode.ERROR))
    for name in names:
        out_console.print(name, markup=False)


def _pair(text: str, option: str, kind: type[float] | type[int]) -> tuple[Any, Any]:
    """Parse ``A,B`` (or ``AxB``) into two numbers, or fail with the option's name."""
    parts = text.replace("x", ",").split(",")
    try:
        first, second = (kind(p.strip()) for p in parts)
    except ValueError:
        raise UsageError(f"{option} takes two numbers like 1,99 or 224,320; got '{text}'") from None
    return first, second


def main() -> None:
    """Console-script entry point."""
    app()


class _RichReporter:
    """Warnings and a progress bar on stderr; silent progress when stderr is not a terminal."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.done = 0
        self.total = 0
        self._progress: Any = None
        self._task: Any = None

    def warn(self, message: str) -> None:
        _warn(message)

    def start(self, total: int) -> None:
        self.total = total
        if self.quiet or total < 2 or not err_console.is_terminal:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("images"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=err_console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("images", total=total, rate="")

    def advance(self, result: ImageResult) -> None:
        self.done += 1
        _state["progress"] = (
            f" after {self.done} of {self.total} images; run the same command with --resume "
            "to finish"
        )
        if result.status == "failed":
            err_console.print(
                Text.assemble(("failed: ", "bold red"), str(result.path), f": {result.error}")
            )
        if self._progress is not None:
            self._progress.advance(self._task)
            speed = self._progress.tasks[0].speed
            if speed:
                self._progress.update(self._task, rate=f"{speed:.1f} img/s")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _print_run(result: RunResult) -> None:
    note = " (random weights: meaningless)" if result.weights.random else ""
    shown = [i for i in result.images if i.status == "ok" and i.predictions]
    for image in shown:
        labels = [
            (p.label if p.label is not None else f"class {p.index}") for p in image.predictions
        ]
        if len(shown) == 1:
            out_console.print(Text.assemble((str(image.path), "bold"), f" top-5{note}:"))
            for p, label in zip(image.predictions, labels, strict=True):
                out_console.print(f"  {p.probability:6.1%}  {label}", markup=False)
        else:  # one line per image keeps a folder run readable
            top = ", ".join(
                f"{label} {p.probability:.0%}"
                for p, label in zip(image.predictions, labels, strict=True)
            )
            out_console.print(Text.assemble((str(image.path), "bold"), f": {top}"))
    ok = len(result.images) - len(result.failed) - len(result.reused)
    out_console.print(
        f"wrote {result.files_written} grids for {ok} image(s) to {result.out}/; "
        f"manifest: {result.manifest}",
        markup=False,
    )


def _print_summary(result: RunResult) -> None:
    """One screen on stderr: what the run did, how fast, and what went wrong."""
    done = len(result.images) - len(result.failed) - len(result.reused)
    rate = done / result.seconds if result.seconds > 0 else 0.0
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "images",
        f"{done} drawn, {len(result.reused)} reused (--resume), "
        f"{len(result.failed)} failed, {len(result.skipped)} non-image skipped",
    )
    table.add_row("layers", f"{len(result.layers)} selected by '{result.selector}'")
    table.add_row("files", f"{result.files_written} PNGs in {result.out}/")
    table.add_row("time", f"{result.seconds:.1f} s ({rate:.1f} images/s) on {result.device}")
    err_console.print(table)
    for failed in result.failed[:10]:
        err_console.print(
            Text.assemble(("  failed ", "red"), str(failed.path), f": {failed.error}")
        )
    if len(result.failed) > 10:
        err_console.print(f"  ... and {len(result.failed) - 10} more in the manifest")


def _print_listing(listing: LayerListing) -> None:
    table = Table(title=f"{listing.model}  (input {listing.input_shape})", title_justify="left")
    if listing.selector is not None:
        table.add_column("sel", justify="center")
    table.add_column("name", overflow="fold")
    table.add_column("type")
    table.add_column("output shape")
    table.add_column("calls", justify="right")
    table.add_column("params", justify="right")
    for row in listing.layers:
        cells = [
            Text(row.name),
            Text(row.module_type),
            Text(str(row.shape) if row.shape is not None else "-"),
            Text(str(row.calls)),
            Text(f"{row.params:,}"),
        ]
        if listing.selector is not None:
            cells.insert(0, Text("●", style="green") if row.selected else Text(""))
        table.add_row(*cells, style="bold" if row.selected else None)
    out_console.print(table)
    if listing.selector is not None:
        selected = sum(1 for row in listing.layers if row.selected)
        out_console.print(
            f"'{listing.selector}' selects {selected} module(s); "
            f"`actviz run` would write {listing.grids} grid(s) per image",
            markup=False,
        )
    else:
        out_console.print(
            f"{len(listing.layers)} modules; preview a selection with --layers, e.g. --layers conv",
            markup=False,
        )


def _listing_json(listing: LayerListing) -> dict[str, Any]:
    return {
        "model": listing.model,
        "input_shape": list(listing.input_shape),
        "selector": listing.selector,
        "grids": listing.grids,
        "layers": [
            {
                "name": row.name,
                "type": row.module_type,
                "shape": list(row.shape) if row.shape is not None else None,
                "calls": row.calls,
                "params": row.params,
                "selected": row.selected,
            }
            for row in listing.layers
        ],
    }


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # type: ignore[func-returns-value]
