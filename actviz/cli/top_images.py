"""``actviz top-images``: the images of a folder that excite each channel most.

Torch is imported inside the command, never here, so ``actviz --help`` stays instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

import typer
from rich.text import Text

from actviz.cli.boundary import app, boundary, reporting
from actviz.cli.console import err_console, out_console, rate_words
from actviz.cli.finish import finish
from actviz.cli.groups import ExecutionFlags, Group, LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    FreshOutOption,
    InputsArg,
    JsonOption,
    LayersOption,
    ModelArg,
    NoReportOption,
    QuietOption,
    SaeFileOption,
    fresh_out,
)

if TYPE_CHECKING:
    from actviz.top_images import TopImagesResult

__all__ = ["top_images"]

TopKOption = Annotated[
    int,
    typer.Option(
        "-k",
        "--top-k",
        min=1,
        max=100,
        help="Images kept per channel.",
        rich_help_panel="Ranking",
    ),
]
ScoreOption = Annotated[
    Literal["max", "mean"],
    typer.Option(
        "--score",
        help="How an image scores for a channel: the max or the mean of its map.",
        rich_help_panel="Ranking",
    ),
]
OverviewChannelsOption = Annotated[
    int,
    typer.Option(
        "--channels",
        "-c",
        min=0,
        help="Channels in each layer's overview picture, one row each (0 = all).",
        rich_help_panel="Output",
    ),
]


@dataclass(frozen=True)
class TopImagesFlags(OptionsFlags):
    """``top-images``' own options: the fields of :class:`actviz.top_images.TopImagesOptions`."""

    placed: ClassVar[Mapping[str, str]] = {"no_report": "execution"}

    layers: LayersOption = None
    k: TopKOption = 9
    score: ScoreOption = "max"
    channels: OverviewChannelsOption = 16
    sae: SaeFileOption = None
    out: FreshOutOption = None
    no_report: NoReportOption = False


#: The execution options ``top-images`` offers: all but --amp and --channels-last.
TopImagesExecution = Annotated[ExecutionFlags, Group(without=("amp", "channels_last"))]


@app.command("top-images")
@boundary
@grouped
def top_images(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: TopImagesFlags,
    load: LoadFlags,
    execution: TopImagesExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """For every channel of the selected layers, the K images of a folder that excite it most.

    One pass over the images. Writes OUT/top-images.json (every channel's top images and
    health), a contact sheet per channel and an overview per layer in OUT/top-images/, and
    the report OUT/top-images.html. Without --layers: the deepest layer of the architecture's
    default selection.
    """
    from actviz.top_images import TopImagesOptions
    from actviz.top_images import top_images as find_top_images

    options = own.build(
        TopImagesOptions,
        out=fresh_out(own.out, reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    with reporting(quiet) as reporter:
        result = find_top_images(model, inputs, options, reporter=reporter)
    finish(
        result.document,
        lambda: _print_result(result),
        lambda: _print_summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=result.failed_count,
        none_done=result.images == 0,
    )


def _print_result(result: TopImagesResult) -> None:
    """Where the results are, and per layer its dead and most selective channels."""
    note = " (random weights: meaningless)" if result.weights.random else ""
    unit = result.layers[0].unit if result.layers else "channel"
    where = (
        f"{result.images} images, top {result.k} per {unit} by the {result.score}: {result.json}"
    )
    if result.report is not None:
        where += f"; report: {result.report}"
    out_console.print(where + note, markup=False)
    for layer in result.layers:
        dead = f"{layer.dead} dead" if layer.dead_judged else "signed scores, none called dead"
        line = f"  {layer.key}: {layer.channels} {layer.unit}s, {dead}"
        if layer.selective_channel is not None:
            name = layer.selective_label or f"class {layer.selective_class}"
            line += (
                f"; most selective: {layer.unit} {layer.selective_channel} "
                f"({layer.selective_count} of {layer.top_count} top images predicted {name})"
            )
        if layer.overview is not None:
            line += f"; overview: {result.out / layer.overview}"
        out_console.print(line, markup=False)


def _print_summary(result: TopImagesResult) -> None:
    done = result.images - result.reused
    rate = rate_words(done, result.seconds)
    err_console.print(
        Text.assemble(
            ("images ", "bold"),
            f"{done} scored, {result.reused} reused (--resume), {result.failed_count} failed, "
            f"{len(result.skipped)} non-image skipped; {result.seconds:.1f} s "
            f"({rate}) on {result.device}",
        )
    )
    for key, reason in result.unranked[:5]:
        err_console.print(Text.assemble(("  not ranked ", "yellow"), key, f": {reason}"))
    for path, reason in result.skipped[:5]:
        err_console.print(Text.assemble(("  skipped ", "yellow"), str(path), f": {reason}"))
    if len(result.skipped) > 5:
        err_console.print(f"  ... and {len(result.skipped) - 5} more in top-images.json")
