"""``actviz atlas``: one layer's whole space over a folder, on one map.

What was written and the largest cells on stdout (or ``atlas.json`` with ``--json``); progress
and the summary on stderr. Torch is imported inside the command, never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

import typer
from rich.text import Text

from actviz.cli.boundary import app, boundary, reporting
from actviz.cli.console import (
    PacedReporter,
    err_console,
    out_console,
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
    ModelArg,
    NoReportOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.atlas import AtlasResult

__all__ = ["atlas"]

_MAP = "Map"
_CELLS = "Cells"
_B = "Second model"

LayerOption = Annotated[
    str,
    typer.Option(
        "--layer",
        "-l",
        help="The layer mapped: its name (layer4), or a selector that matches one output "
        "(actviz list-layers MODEL lists them).",
        show_default=False,
    ),
]
PointsOption = Annotated[
    str,
    typer.Option(
        "--points",
        metavar="pooled|spatial:K",
        help="pooled: one vector per image (the spatial mean); spatial:K: K positions of "
        "each image's map, drawn at random from --seed and the image's name.",
        rich_help_panel=_MAP,
    ),
]
ReduceOption = Annotated[
    Literal["umap", "pca"],
    typer.Option(
        "--reduce",
        help="The 2-D layout after PCA to 50 dimensions: umap (pip install 'actviz[atlas]') "
        "or pca (the first two components).",
        rich_help_panel=_MAP,
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seeds UMAP, the spatial positions and the icons: the same seed, the same map.",
        rich_help_panel=_MAP,
    ),
]
NeighborsOption = Annotated[
    int,
    typer.Option("--neighbors", min=2, max=200, help="UMAP's n_neighbors.", rich_help_panel=_MAP),
]
ColorOption = Annotated[
    str | None,
    typer.Option(
        "--color",
        metavar="class|pred|unit:K",
        help="Colour the points by class folder (FOLDER/CLASS/image), the model's "
        "prediction, or unit K's value. \\[default: class with class folders, else pred]",
        rich_help_panel=_MAP,
        show_default=False,
    ),
]
GridOption = Annotated[
    int,
    typer.Option(
        "--grid", min=2, max=200, help="Cells per side of the grid.", rich_help_panel=_CELLS
    ),
]
MinCountOption = Annotated[
    int,
    typer.Option(
        "--min-count",
        min=1,
        help="Cells with fewer points are dropped (their points stay in the table).",
        rich_help_panel=_CELLS,
    ),
]
NearestOption = Annotated[
    int,
    typer.Option(
        "--nearest",
        min=1,
        max=16,
        help="Real images (or patches) per cell: the points nearest its mean.",
        rich_help_panel=_CELLS,
    ),
]
IconsOption = Annotated[
    Literal["none", "fv"],
    typer.Option(
        "--icons",
        help="fv: also a feature visualization of each cell's mean, optimized as actviz "
        "optimize does (seconds a cell on a CPU).",
        rich_help_panel=_CELLS,
    ),
]
IconStepsOption = Annotated[
    int,
    typer.Option(
        "--icon-steps", min=1, help="Optimization steps per icon.", rich_help_panel=_CELLS
    ),
]
IconSizeOption = Annotated[
    int,
    typer.Option(
        "--icon-size", min=16, max=512, help="Icon side in pixels.", rich_help_panel=_CELLS
    ),
]
AgainstOption = Annotated[
    Path | None,
    typer.Option(
        "--against",
        metavar="CHECKPOINT",
        help="Model B: MODEL with this checkpoint, its vectors mapped onto MODEL's (ridge "
        "regression on the same images) and laid out on the same map.",
        rich_help_panel=_B,
        show_default=False,
    ),
]
AgainstModelOption = Annotated[
    str | None,
    typer.Option(
        "--against-model",
        metavar="NAME_OR_FACTORY",
        help="Model B: another model (a torchvision name, timm/NAME, hf:FOLDER_OR_ID, or "
        "file.py:factory, which runs that code).",
        rich_help_panel=_B,
        show_default=False,
    ),
]
AgainstWeightsOption = Annotated[
    str | None,
    typer.Option(
        "--against-weights",
        metavar="W",
        help="Weights of --against-model, as --weights takes them (default: as --weights).",
        rich_help_panel=_B,
        show_default=False,
    ),
]
AgainstLayerOption = Annotated[
    str | None,
    typer.Option(
        "--against-layer",
        metavar="NAME",
        help="Model B's layer. \\[default: --layer]",
        rich_help_panel=_B,
        show_default=False,
    ),
]
RidgeOption = Annotated[
    float,
    typer.Option(
        "--ridge",
        help="Ridge penalty of the map from B onto A, relative to B's mean variance.",
        rich_help_panel=_B,
    ),
]
AtlasOutOption = Annotated[Path | None, fresh_out_option("actviz-atlas", holding="earlier files")]
AtlasExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address"), replace={"workers": DecodeWorkersOption}),
]


class _Reporter(PacedReporter):
    command = "atlas"


@dataclass(frozen=True, kw_only=True)
class AtlasFlags(OptionsFlags):
    """``atlas``'s own options: the fields of :class:`actviz.atlas.AtlasOptions`; ``--layer`` is
    required."""

    placed: ClassVar[Mapping[str, str]] = {"no_report": "execution"}
    renamed: ClassVar[Mapping[str, str]] = {"color": "colour"}

    layer: LayerOption
    points: PointsOption = "pooled"
    reduce: ReduceOption = "umap"
    seed: SeedOption = 0
    neighbors: NeighborsOption = 15
    color: ColorOption = None
    grid: GridOption = 20
    min_count: MinCountOption = 3
    nearest: NearestOption = 3
    icons: IconsOption = "none"
    icon_steps: IconStepsOption = 128
    icon_size: IconSizeOption = 64
    against: AgainstOption = None
    against_model: AgainstModelOption = None
    against_weights: AgainstWeightsOption = None
    against_layer: AgainstLayerOption = None
    ridge: RidgeOption = 1e-3
    out: AtlasOutOption = None
    no_report: NoReportOption = False


@app.command("atlas")
@boundary
@grouped
def atlas(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: AtlasFlags,
    load: LoadFlags,
    execution: AtlasExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Map one layer's whole space over a folder: an activation atlas.

    Every image (or K positions of each, --points spatial:K) placed by its activation vector
    (PCA on the model's device, then UMAP or the first two components), the map cut into a
    --grid of cells, each cell shown by the real images nearest its mean (or a feature
    visualization, --icons fv) and labelled with the class it supports where the layer
    reaches a linear readout. --against puts a second model or checkpoint on the same map.

    Writes OUT/atlas.html, OUT/atlas.png, OUT/atlas.json and OUT/points.parquet; --resume
    reuses an earlier run's points (another --grid or --reduce needs no forward).
    """
    from actviz.atlas import AtlasOptions
    from actviz.atlas import atlas as run_atlas

    options = own.build(
        AtlasOptions,
        out=fresh_out(own.out, base="actviz-atlas", reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    made = not options.out.exists()
    with reporting(quiet, _Reporter) as reporter:
        result = run_atlas(model, inputs, options, reporter=reporter)
    total = result.images + len(result.failed)
    finish(
        result.record,
        lambda: print_atlas(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=0 < len(result.failed) == total,
        made=options.out if made else None,
    )


def print_atlas(result: AtlasResult) -> None:
    """The largest cells and what they support, and what was written."""
    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: this map describes an untrained model", style="bold red")
        )
    readout = result.readout
    supports = (
        f"supported class: argmax(W . mean + b) of {readout.get('module')}"
        if readout.get("linear")
        else f"no supported class: {readout.get('reason')}"
    )
    out_console.print(
        f"{result.layer}: {result.points:,} points from {result.images:,} images, "
        f"{len(result.cells):,} cells of {result.grid} x {result.grid} (at least "
        f"{result.min_count} points); {supports}",
        markup=False,
    )
    for cell in sorted(result.cells, key=lambda c: -int(c["count"]))[:5]:
        what = cell.get("class_name") or (
            "" if cell.get("class") is None else f"class {cell['class']}"
        )
        colour = cell.get("colour") or {}
        mostly = colour.get("label") or (
            f"{colour['mean']:.3g}" if colour.get("mean") is not None else ""
        )
        out_console.print(
            f"  cell {cell['row']},{cell['col']}: {cell['count']} points"
            + (f", supports {what}" if what else "")
            + (f", mostly {mostly}" if mostly else ""),
            markup=False,
        )
    print_written(result.out, result.report, result.picture, result.record, result.table)


def _summary(result: AtlasResult) -> None:
    done = result.images - result.reused
    print_grid(
        [
            (
                "images",
                f"{done} run, {result.reused} reused (--resume), {len(result.failed)} failed, "
                f"{len(result.skipped)} non-image skipped",
            ),
            ("layout", f"{result.reduce}, coloured by {result.colour}"),
            (
                "time",
                f"{result.seconds:.1f} s ({result.forward_seconds:.1f} s forward, "
                f"{rate_words(done, result.forward_seconds)}) on {result.device}",
            ),
        ]
    )
    for image, why in result.failed[:5]:
        err_console.print(Text.assemble(("  failed ", "bold red"), image, f": {why}"))
