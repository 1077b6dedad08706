"""``actviz attribute``: which input pixels a classifier's class score rests on, per image.

Per method its axiom over the images on stdout (a rich table on a terminal, plain columns when
piped, or ``attribute.json`` with ``--json``); progress and the summary on stderr. Torch is
imported inside the command, never here.
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
    PacedReporter,
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
    ModelArg,
    NoReportOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.attribute import AttributeResult

__all__ = ["attribute"]

_PANEL = "Attribution"

MethodOption = Annotated[
    list[str] | None,
    typer.Option(
        "--method",
        "-m",
        metavar="METHODS",
        help=(
            "Attribution methods, each drawn per image: ig (Integrated Gradients), smoothgrad, "
            "gradxinput (gradient x input), lrp (zennit's rules, convolutional networks: pip "
            "install 'actviz\\[lrp]'), rollout and grad-rollout (vision transformers); "
            "comma-separate or repeat. \\[default: ig]"
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
TargetOption = Annotated[
    str,
    typer.Option(
        "--target",
        help="The class explained: top1 (each image its own), a class index or name.",
        rich_help_panel=_PANEL,
    ),
]
StepsOption = Annotated[
    int,
    typer.Option(
        "--steps",
        min=1,
        max=10_000,
        help="ig: points of the path integral (they go through the model --batch-size at a time).",
        rich_help_panel=_PANEL,
    ),
]
IntegrationOption = Annotated[
    Literal[
        "gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_middle", "riemann_right"
    ],
    typer.Option(
        "--integration",
        help="ig: the rule of the path integral, as captum names them (its default first).",
        rich_help_panel=_PANEL,
    ),
]
BaselineOption = Annotated[
    str,
    typer.Option(
        "--baseline",
        metavar="zero|blur|mean|FILE",
        help=(
            "ig: the path's start: zero in the model's input space (the dataset's mean colour "
            "for ImageNet models), the input blurred, its mean colour, or an image file."
        ),
        rich_help_panel=_PANEL,
    ),
]
SamplesOption = Annotated[
    int,
    typer.Option(
        "--samples",
        min=1,
        max=10_000,
        help="smoothgrad: noisy copies of each input.",
        rich_help_panel=_PANEL,
    ),
]
NoiseOption = Annotated[
    float,
    typer.Option(
        "--noise",
        metavar="FRACTION",
        min=0.0,
        max=10.0,
        help="smoothgrad: the noise's standard deviation, a fraction of each input's range.",
        rich_help_panel=_PANEL,
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed",
        help="smoothgrad: the noise's seed (the same seed gives the same map).",
        rich_help_panel=_PANEL,
    ),
]
CompositeOption = Annotated[
    Literal[
        "epsilon_plus_flat",
        "epsilon_plus",
        "epsilon_gamma_box",
        "epsilon_alpha2_beta1",
        "epsilon_alpha2_beta1_flat",
    ],
    typer.Option("--composite", help="lrp: zennit's composite of rules.", rich_help_panel=_PANEL),
]
HeadFusionOption = Annotated[
    Literal["mean", "max", "min"],
    typer.Option(
        "--head-fusion", help="rollout: how a block's heads are fused.", rich_help_panel=_PANEL
    ),
]
DiscardOption = Annotated[
    float,
    typer.Option(
        "--discard-ratio",
        metavar="FRACTION",
        min=0.0,
        max=0.99,
        help="rollout, grad-rollout: the share of each block's lowest attention set to 0.",
        rich_help_panel=_PANEL,
    ),
]
SaveTensorsOption = Annotated[
    bool,
    typer.Option(
        "--save-tensors",
        help=(
            "Also write each attribution (C, H, W) and the model's input as it saw it, as "
            ".npy beside the pictures."
        ),
        rich_help_panel="Output",
    ),
]
AlphaOption = Annotated[
    float,
    typer.Option(
        "--alpha",
        metavar="FRACTION",
        min=0.0,
        max=1.0,
        help="Weight of the map's colours over the input in the overlay.",
        rich_help_panel="Output",
    ),
]
AttributeOutOption = Annotated[
    Path | None, fresh_out_option("actviz-attribute", holding="earlier files")
]
RowsOption = Annotated[
    int,
    typer.Option(
        "--batch-size",
        "-b",
        min=1,
        help=(
            "Rows per forward and backward: images per batch, and ig's steps and smoothgrad's "
            "copies go through the model this many at a time (memory is one such batch's)."
        ),
        rich_help_panel="Speed",
    ),
]
AttributeExecution = Annotated[
    ExecutionFlags,
    Group(
        without=("engine", "ray_address", "amp"),
        replace={"workers": DecodeWorkersOption, "batch_size": RowsOption},
    ),
]


class _Reporter(PacedReporter):
    # IG runs --steps forwards and backwards an image: seconds an image on a CPU.
    command = "attribute"


@dataclass(frozen=True)
class AttributeFlags(OptionsFlags):
    """``attribute``'s own options: the fields of :class:`actviz.attribute.AttributeOptions`,
    the methods' settings among them (its ``settings``)."""

    placed: ClassVar[Mapping[str, str]] = {"no_report": "execution"}
    renamed: ClassVar[Mapping[str, str]] = {"method": "methods"}
    nested: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "settings": (
            "steps",
            "integration",
            "baseline",
            "samples",
            "noise",
            "seed",
            "composite",
            "head_fusion",
            "discard_ratio",
        )
    }
    defaulted: ClassVar[tuple[str, ...]] = ("method",)

    method: MethodOption = None
    target: TargetOption = "top1"
    steps: StepsOption = 32
    integration: IntegrationOption = "gausslegendre"
    baseline: BaselineOption = "zero"
    samples: SamplesOption = 16
    noise: NoiseOption = 0.15
    seed: SeedOption = 0
    composite: CompositeOption = "epsilon_plus_flat"
    head_fusion: HeadFusionOption = "mean"
    discard_ratio: DiscardOption = 0.0
    out: AttributeOutOption = None
    save_tensors: SaveTensorsOption = False
    alpha: AlphaOption = 0.5
    no_report: NoReportOption = False


@app.command("attribute")
@boundary
@grouped
def attribute(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: AttributeFlags,
    load: LoadFlags,
    execution: AttributeExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Attribute the class score to input pixels: IG, SmoothGrad, gradient x input, LRP, rollout.

    Per image and method: what the model saw, the map over it and the map alone (signed maps
    red for and blue against the class), with the method's axiom checked: Integrated
    Gradients' completeness (warned about when the steps are too few), LRP's conservation,
    rollout's row sums.

    Writes OUT/<image>/<method>.png, OUT/attribute.json, OUT/attribute.html and, with
    --save-tensors, OUT/<image>/<method>.npy and OUT/<image>/input.npy.
    """
    from actviz.attribute import AttributeOptions
    from actviz.attribute import attribute as run_attribute

    options = own.build(
        AttributeOptions,
        out=fresh_out(
            own.out, base="actviz-attribute", reuse=execution.resume or execution.overwrite
        ),
        load=load,
        execution=execution,
    )
    with reporting(quiet, _Reporter) as reporter:
        result = run_attribute(model, inputs, options, reporter=reporter)
    finish(
        result.record,
        lambda: print_attribute(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=0 < len(result.failed) == len(result.images),
        verb="attributed",
    )


_COLUMNS = ["method", "axiom", "images", "flagged", "worst"]


def _rows(result: AttributeResult) -> list[tuple[list[str], bool]]:
    rows = []
    for method in result.methods:
        summary = result.axioms.get(method) or {}
        worst = summary.get("worst")
        if worst is None:
            shown = "-"
        elif summary.get("axiom") == "completeness":
            shown = f"{float(worst):.2%} of F(x) - F(x')"
        else:
            shown = f"{float(worst):.4g}"
        flagged = int(summary.get("flagged") or 0)
        rows.append(
            (
                [
                    method,
                    str(summary.get("axiom") or "none"),
                    str(summary.get("images", 0)),
                    str(flagged),
                    shown,
                ],
                flagged > 0,
            )
        )
    return rows


def print_attribute(result: AttributeResult) -> None:
    """Each method's axiom over the images, and what was written."""
    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: these attributions describe an untrained model", style="bold red")
        )
    ok = len(result.images) - len(result.failed)
    out_console.print(
        f"{ok} image{'' if ok == 1 else 's'}; per method its axiom over the images "
        "(flagged: outside its tolerance, see docs/attribute.md)",
        markup=False,
    )
    rows = _rows(result)
    if out_console.is_terminal:
        table = Table()
        for i, head in enumerate(_COLUMNS):
            table.add_column(head, justify="left" if i < 2 else "right")
        for cells, flagged in rows:
            table.add_row(*(Text(c) for c in cells), style="bold red" if flagged else None)
        out_console.print(table)
    else:
        print_columns([_COLUMNS, *(cells for cells, _ in rows)], left=(0, 1))
    print_written(
        result.out,
        result.record,
        result.report,
        more=[f"{len(result.pictures())} pictures in the images' folders"],
    )


def _summary(result: AttributeResult) -> None:
    ok = len(result.images) - len(result.failed)
    rate = rate_words(ok - result.reused, result.seconds)
    print_grid(
        [
            (
                "images",
                f"{ok - result.reused} attributed, {result.reused} reused (--resume), "
                f"{len(result.failed)} failed, {len(result.skipped)} non-image skipped",
            ),
            ("methods", ", ".join(result.methods)),
            ("time", f"{result.seconds:.1f} s ({rate}) on {result.device}"),
        ]
    )
    for record in result.failed[:5]:
        err_console.print(
            Text.assemble(
                ("  failed ", "bold red"), str(record.get("path")), f": {record.get('error')}"
            )
        )
