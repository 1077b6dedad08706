"""``actviz diff``: compare two models (or two images) layer by layer.

Results on stdout (the first divergent layer and the least similar layers: a rich table on a
terminal, plain columns when piped, or ``diff.json`` with ``--json``); progress and the summary
on stderr. Torch is imported inside the command, never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

import typer
from rich.table import Table
from rich.text import Text

from actviz.cli.boundary import app, boundary, reporting
from actviz.cli.console import (
    RichReporter,
    err_console,
    out_console,
    print_columns,
    print_grid,
    print_written,
    rate_words,
)
from actviz.cli.finish import finish
from actviz.cli.groups import ExecutionFlags, Group, LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    DecodeWorkersOption,
    InputsArg,
    JsonOption,
    LayersOption,
    MaxChannelsOption,
    ModelArg,
    NoReportOption,
    PngCompressionOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.diff import DiffResult, LayerDiff
    from actviz.results import ImageResult

__all__ = ["diff"]

AgainstOption = Annotated[
    Path | None,
    typer.Option(
        "--against",
        metavar="CHECKPOINT",
        help="Model B: MODEL (or --against-model) with this checkpoint file.",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

AgainstModelOption = Annotated[
    str | None,
    typer.Option(
        "--against-model",
        metavar="NAME_OR_FACTORY",
        help="Model B: another model with the same layer names (a torchvision name, "
        "timm/NAME, hf:FOLDER_OR_ID, or file.py:factory, which runs that code).",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

AgainstWeightsOption = Annotated[
    str | None,
    typer.Option(
        "--against-weights",
        metavar="W",
        help="Weights of model B, as --weights takes them (default: the same as --weights).",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

DiffMetricOption = Annotated[
    Literal["cosine", "cka"],
    typer.Option(
        "--metric",
        help="Which similarity --threshold applies to: cosine (per image) or cka (over the "
        "images).",
        rich_help_panel="Comparison",
    ),
]

DiffThresholdOption = Annotated[
    float,
    typer.Option(
        "--threshold",
        help="The first layer whose --metric is below this is the first divergent layer.",
        rich_help_panel="Comparison",
    ),
]

DiffImagesOption = Annotated[
    int,
    typer.Option(
        "--images",
        min=0,
        help="Difference pictures for the first N images only (0: none), so large folders "
        "stay fast.",
        rich_help_panel="Output",
    ),
]

#: ``--out`` of ``diff``: left out, the first free one of actviz-diff, actviz-diff-2, ...
DiffOutOption = Annotated[
    Path | None,
    fresh_out_option(
        "actviz-diff", holding="an earlier comparison's files", unless="--overwrite is not given"
    ),
]

#: The execution options of ``diff``: decoding workers, no engine, nothing to resume.
DiffExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address", "resume"), replace={"workers": DecodeWorkersOption}),
]


@dataclass(frozen=True)
class DiffFlags(OptionsFlags):
    """``diff``'s own options: the fields of :class:`actviz.diff.DiffOptions`."""

    placed: ClassVar[Mapping[str, str]] = {"metric": "load", "no_report": "execution"}

    against: AgainstOption = None
    against_model: AgainstModelOption = None
    against_weights: AgainstWeightsOption = None
    layers: LayersOption = None
    out: DiffOutOption = None
    metric: DiffMetricOption = "cosine"
    threshold: DiffThresholdOption = 0.99
    images: DiffImagesOption = 4
    max_channels: MaxChannelsOption = 16
    png_compression: PngCompressionOption = 1
    no_report: NoReportOption = False


@app.command()
@boundary
@grouped
def diff(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: DiffFlags,
    load: LoadFlags,
    execution: DiffExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Compare two models (or two images) layer by layer: CKA, cosine, relative L2.

    Two models: MODEL with --weights A.pt against --against B.pt (or --against-model NAME).

    Two images: MODEL IMAGE_A IMAGE_B, without --against.

    Writes OUT/diff.json, OUT/similarity.png, OUT/diff.html, and A | B | B - A pictures.
    """
    from actviz.diff import DiffOptions
    from actviz.diff import diff as run_diff

    options = own.build(
        DiffOptions,
        out=fresh_out(own.out, base="actviz-diff", reuse=execution.overwrite, resumable=False),
        load=load,
        execution=execution,
    )
    made = not options.out.exists()
    with reporting(quiet, _DiffReporter) as reporter:
        result = run_diff(model, inputs, options, reporter=reporter)
    finish(
        result.record,
        lambda: print_diff(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=0 < len(result.failed) == len(result.images),
        made=options.out if made else None,
    )


class _DiffReporter(RichReporter):
    """The run's progress bar; an interrupted diff has nothing to resume (it removes the
    pictures it drew), so the message on Ctrl-C says how far it got and what to do."""

    def start(self, total: int) -> None:
        super().start(total)
        self.status["progress"] = "; nothing was kept: run the same command again"

    def advance(self, result: ImageResult) -> None:
        super().advance(result)
        self.status["progress"] = (
            f" after {self.done} of {self.total} images; nothing was kept (a diff writes its "
            "results at the end): run the same command again"
        )


def print_diff(result: DiffResult) -> None:
    """The first divergent layer, the least similar layers, and what was written."""
    metric, threshold = result.metric, result.threshold
    first = next((x for x in result.layers if x.name == result.first_divergent), None)
    if first is not None:
        value = first.similarity(metric)
        out_console.print(
            Text.assemble(
                ("first divergent layer: ", "bold red"),
                (first.name, "bold"),
                f" ({metric} {_fmt(value)} < {threshold:g})",
            )
        )
    elif result.layers:
        out_console.print(
            Text.assemble(
                ("no divergent layer: ", "bold green"),
                f"{metric} >= {threshold:g} on all {len(result.layers)} layers",
            )
        )
    from actviz.diff.result import REL_L2_CHANGED

    changed = next((x for x in result.layers if x.name == result.first_changed), None)
    if changed is not None and changed.name != result.first_divergent:
        # A pure scaling keeps the cosine at 1: the relative L2 is where it shows.
        out_console.print(
            f"first changed layer: {changed.name} (rel_l2 {_fmt(changed.rel_l2)} > "
            f"{REL_L2_CHANGED:g})",
            markup=False,
        )
    lowest = result.lowest(5)
    if lowest:
        out_console.print(f"lowest {metric}:", markup=False)
        columns = _COLUMNS if result.mode == "models" else [c for c in _COLUMNS if c != "cka"]
        if out_console.is_terminal:
            _table(lowest, columns, result.first_divergent)
        else:
            print_columns([columns, *_rows(lowest, columns)], left=(0, 1))
    more = []
    if result.pictures:
        count = result.pictured
        which = (
            "the image pair"
            if result.mode == "images"
            else f"first {count} image{'s' if count != 1 else ''}"
        )
        more.append(f"{len(result.pictures)} difference pictures ({which})")
    print_written(result.out, result.record, result.chart, result.report, more=more)


_COLUMNS = ["layer", "type", "cka", "cosine", "rel_l2"]


def _rows(layers: list[LayerDiff], columns: list[str]) -> list[list[str]]:
    rows = []
    for x in layers:
        cells = {
            "layer": x.name,
            "type": x.module_type,
            "cka": _fmt(x.cka),
            "cosine": _fmt(x.cosine),
            "rel_l2": _fmt(x.rel_l2, 3),
        }
        rows.append([cells[c] for c in columns])
    return rows


def _table(layers: list[LayerDiff], columns: list[str], first: str | None) -> None:
    table = Table()
    for i, head in enumerate(columns):
        table.add_column(head, justify="right" if i >= 2 else "left", overflow="fold")
    for layer, row in zip(layers, _rows(layers, columns), strict=True):
        table.add_row(*(Text(c) for c in row), style="bold red" if layer.name == first else None)
    out_console.print(table)


def _summary(result: DiffResult) -> None:
    ok = len(result.images) - len(result.failed)
    rate = rate_words(ok, result.seconds)
    print_grid(
        [
            (
                "images",
                f"{ok} compared, {len(result.failed)} failed, {len(result.skipped)} non-image "
                "skipped",
            ),
            ("layers", f"{len(result.layers)} selected by '{result.selector}'"),
            ("time", f"{result.seconds:.1f} s ({rate}) on {result.device}"),
        ]
    )
    for path, reason in result.skipped[:5]:
        err_console.print(Text.assemble(("  skipped ", "yellow"), str(path), f": {reason}"))


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if digits == 4 else f"{value:.{digits}g}"
