"""``actviz optimize``: for each selected channel, an image optimized to excite it.

Torch is imported inside the command, never here, so ``actviz --help`` stays instant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer

from actviz.cli.boundary import app, boundary, state, stopping
from actviz.cli.console import (
    Bar,
    PaceLines,
    duration_words,
    err_console,
    out_console,
    pace_words,
    progress_bar,
)
from actviz.cli.finish import print_outcome
from actviz.cli.groups import LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    JsonOption,
    LayersOption,
    ModelArg,
    NoReportOption,
    OverwriteOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.optimize import OptimizeResult

__all__ = ["optimize"]

_PANEL = "Optimization"

ChannelsOption = Annotated[
    str,
    typer.Option(
        "--channels",
        "-c",
        help="Channels of each layer, as 0-15 or 3,7,9-11.",
        rich_help_panel=_PANEL,
    ),
]
StepsOption = Annotated[
    int, typer.Option("--steps", min=1, help="Adam steps per image.", rich_help_panel=_PANEL)
]
SizeOption = Annotated[
    int,
    typer.Option("--size", min=16, max=1024, help="Image side in pixels.", rich_help_panel=_PANEL),
]
NeuronOption = Annotated[
    bool,
    typer.Option(
        "--neuron",
        help="Maximize each channel's centre unit instead of its spatial mean.",
        rich_help_panel=_PANEL,
    ),
]
#: Left out: actviz-out, beside a run's or top-images' results (their pages link to each
#: other), unless it already holds an optimize's.
OptimizeOutOption = Annotated[
    Path | None,
    fresh_out_option(
        "actviz-out",
        holding="an earlier optimize's results",
        unless="--overwrite is not given",
    ),
]
ObjectiveOption = Annotated[
    str | None,
    typer.Option(
        "--objective",
        metavar="CLASS",
        help="Maximize the model's output instead: class logits (207, or 1,5-7), or output "
        "dimensions of a model that gives features; --layers and --channels are then ignored.",
        rich_help_panel=_PANEL,
    ),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Seed of the initial images and transforms.")
]
BatchOption = Annotated[
    int,
    typer.Option(
        "--batch-size",
        "-b",
        min=1,
        help="Channels optimized together in one batch.",
        rich_help_panel=_PANEL,
    ),
]


class _Bar(Bar):
    """The steps of every batch as one bar, with steps/s and the time left; the cost said
    after the second step, and where stderr is not a terminal, a plain line every tenth of the
    steps or every ``every`` seconds instead of the bar."""

    def __init__(self, quiet: bool, *, every: float = 30.0) -> None:
        super().__init__(quiet)
        self._lines = PaceLines(every)
        self._started = 0.0
        self._first = 0.0  # when the first step ended: the pace after it leaves out warm-up

    def start(self, total: int) -> None:
        self.total = total
        self._started = self._lines.said = time.monotonic()
        state["progress"] = "; the finished channels are kept"
        if self.quiet or not err_console.is_terminal:
            return
        self._progress, self._task = progress_bar("steps", total)

    def advance(self, result: Any = None) -> None:
        self.done += 1
        state["progress"] = (
            f" after {self.done} of {self.total} steps; the finished channels are kept"
        )
        if self._progress is not None:
            self._progress.advance(self._task)
            speed = self._progress.tasks[0].speed
            if speed:
                self._progress.update(self._task, rate=f"{speed:.1f} steps/s")
        if self.quiet or self.done >= self.total:
            return
        now = time.monotonic()
        if self.done == 1:
            # The first step carries one-time costs (imports, allocations): the pace is the
            # second's.
            self._first = now
        elif self.done == 2:
            pace = now - self._first
            left = pace * (self.total - self.done)
            self._say(
                f"optimize: {self.total} steps at {pace_words(pace)} a step: about "
                f"{duration_words(now - self._started + left)} in all; --steps and --size lower it",
                now,
            )
        elif self._progress is None and self._lines.due(self.done, self.total, now):
            self._lines.mark(self.done, self.total, now)
            pace = (now - self._first) / (self.done - 1)
            remaining = duration_words(pace * (self.total - self.done))
            self._say(
                f"optimize: {self.done} of {self.total} steps ({self.done / self.total:.0%}), "
                f"{pace_words(pace)} a step, about {remaining} left",
                now,
            )

    def _say(self, line: str, now: float) -> None:
        self._lines.said = now
        err_console.print(line, markup=False, highlight=False)


@dataclass(frozen=True)
class OptimizeFlags(OptionsFlags):
    """``optimize``'s own options: the fields of :class:`actviz.optimize.OptimizeOptions`."""

    placed: ClassVar[Mapping[str, str]] = {"overwrite": "load"}

    layers: LayersOption = None
    channels: ChannelsOption = "0-15"
    steps: StepsOption = 512
    size: SizeOption = 224
    neuron: NeuronOption = False
    objective: ObjectiveOption = None
    seed: SeedOption = 0
    batch_size: BatchOption = 16
    out: OptimizeOutOption = None
    overwrite: OverwriteOption = False
    no_report: NoReportOption = False


@app.command("optimize")
@boundary
@grouped
def optimize(
    model: ModelArg,
    *,
    own: OptimizeFlags,
    load: LoadFlags,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """For each selected channel, an image optimized to excite it (feature visualization).

    Images start from a decorrelated Fourier parameterization and are optimized by Adam
    through random padding, jitter, scaling and rotation (Lucent's recipe); the channels of a
    layer are optimized together in one batch. Writes OUT/optimize.json (each channel's
    activation over the steps), OUT/optimize/NN_layer.png (one sheet per layer), one PNG per
    channel, and the page OUT/optimize.html. Without --layers: the deepest layer of the
    architecture's default selection. Ctrl-C keeps the finished channels.
    """
    from actviz.optimize import OptimizeOptions
    from actviz.optimize import optimize as run_optimize

    options = own.build(
        OptimizeOptions,
        out=fresh_out(
            own.out,
            reuse=own.overwrite,
            resumable=False,
            taken=_holds_optimize,
            holding="an earlier optimize's results",
        ),
        load=load,
    )
    with stopping(_Bar(quiet)) as bar:
        result = run_optimize(model, options, reporter=bar)
    print_outcome(result.document, lambda: _print_result(result), as_json=as_json)


def _holds_optimize(folder: Path) -> bool:
    from actviz.optimize.pipeline import FOLDER, JSON_FILE

    return (folder / JSON_FILE).exists() or (folder / FOLDER).exists()


#: A layer's channels in words: channels, a classifier's classes, or output dimensions.
_PLURAL = {"channel": "channels", "class": "classes", "dimension": "output dimensions"}


def _print_result(result: OptimizeResult) -> None:
    note = (
        " (RANDOM WEIGHTS: an untrained network; these images are noise with structure)"
        if result.weights.random
        else ""
    )
    where = f"{result.channels} images, {result.steps} steps at {result.size} px: {result.json}"
    if result.report is not None:
        where += f"; report: {result.report}"
    out_console.print(where + note, markup=False)
    for layer in result.layers:
        if not layer.channels:
            continue
        best = max(layer.channels, key=lambda c: c.final)
        count = f"{len(layer.channels)} {_PLURAL.get(layer.unit, layer.unit)}"
        line = f"  {layer.key}: {count}; highest: {layer.unit} {best.channel}"
        line += f" ({best.final:.3g})"
        if layer.sheet is not None:
            line += f"; sheet: {result.out / layer.sheet}"
        out_console.print(line, markup=False)
    rate = result.channels * result.steps / result.seconds if result.seconds > 0 else 0.0
    err_console.print(
        f"optimized {result.channels} channels in {result.seconds:.1f} s "
        f"({rate:.1f} channel-steps/s) on {result.device}",
        markup=False,
        highlight=False,
    )
