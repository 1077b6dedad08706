"""``actviz cam-eval``: which CAM method's maps the model really follows, over a folder.

The verdict table on stdout (a rich table on a terminal, plain columns when piped, or
``cam-eval.json`` with ``--json``); progress and the summary on stderr. Torch is imported inside
the command, never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

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
    from actviz.cam_eval import CamEvalResult

__all__ = ["cam_eval"]

MethodsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--methods",
        "-m",
        metavar="METHODS",
        help=(
            "Methods to score: the CAMs gradcam, gradcam++, layercam, scorecam, eigencam and "
            "the attributions ig, smoothgrad, gradxinput, lrp, rollout, grad-rollout "
            "(comma-separate or repeat). \\[default: gradcam,gradcam++,layercam,eigencam; "
            "scorecam runs one forward per channel and image]"
        ),
        rich_help_panel="Evaluation",
        show_default=False,
    ),
]

TargetOption = Annotated[
    str,
    typer.Option(
        "--target",
        help="The class the maps explain: top1 (each image its own), a class index or name.",
        rich_help_panel="Evaluation",
    ),
]

StepsOption = Annotated[
    int,
    typer.Option(
        "--steps",
        min=2,
        max=1000,
        help="Points of each deletion and insertion curve after the first.",
        rich_help_panel="Evaluation",
    ),
]

SanityBlocksOption = Annotated[
    int,
    typer.Option(
        "--sanity-blocks",
        min=0,
        help=(
            "Blocks re-initialised one more at a time from the output down for the sanity "
            "check (0: none)."
        ),
        rich_help_panel="Evaluation",
    ),
]

SeedOption = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seed of the random-map baseline and the re-initialised weights.",
        rich_help_panel="Evaluation",
    ),
]

ChunkOption = Annotated[
    int,
    typer.Option(
        "--chunk",
        min=0,
        help=(
            "Perturbed images per forward (0: 8 times --batch-size, on a CPU at most about "
            "400k pixels a chunk)."
        ),
        rich_help_panel="Speed",
    ),
]

IgStepsOption = Annotated[
    int,
    typer.Option(
        "--ig-steps",
        min=1,
        max=10_000,
        help="ig: points of the path integral (attribute's --steps).",
        rich_help_panel="Attribution",
    ),
]

BaselineOption = Annotated[
    str,
    typer.Option(
        "--baseline",
        metavar="zero|blur|mean|FILE",
        help="ig: the path's start (attribute's --baseline).",
        rich_help_panel="Attribution",
    ),
]

SamplesOption = Annotated[
    int,
    typer.Option(
        "--samples",
        min=1,
        max=10_000,
        help="smoothgrad: noisy copies of each input (the noise seeded with --seed).",
        rich_help_panel="Attribution",
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
        rich_help_panel="Attribution",
    ),
]

CamEvalLayerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--layers",
        "-l",
        help=(
            "The one layer the maps are computed at: its name (layer4), or a selector that "
            "matches one module, as run's --layers takes them. \\[default: the layer run "
            "--cam draws, the last spatial layer whose positions reach the classifier]"
        ),
        show_default=False,
    ),
]

CamEvalOutOption = Annotated[
    Path | None, fresh_out_option("actviz-cam-eval", holding="earlier files")
]

CamEvalExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address", "amp"), replace={"workers": DecodeWorkersOption}),
]


@dataclass(frozen=True)
class CamEvalFlags(OptionsFlags):
    """``cam-eval``'s own options: the fields of :class:`actviz.cam_eval.CamEvalOptions`, the
    attributions' settings among them (its ``attribution``, seeded by the same ``--seed``)."""

    placed: ClassVar[Mapping[str, str]] = {"chunk": "load", "no_report": "execution"}
    renamed: ClassVar[Mapping[str, str]] = {"ig_steps": "steps"}
    nested: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "attribution": ("ig_steps", "baseline", "samples", "noise", "seed")
    }
    defaulted: ClassVar[tuple[str, ...]] = ("methods",)

    methods: MethodsOption = None
    layers: CamEvalLayerOption = None
    target: TargetOption = "top1"
    steps: StepsOption = 32
    sanity_blocks: SanityBlocksOption = 3
    seed: SeedOption = 0
    ig_steps: IgStepsOption = 32
    baseline: BaselineOption = "zero"
    samples: SamplesOption = 16
    noise: NoiseOption = 0.15
    out: CamEvalOutOption = None
    chunk: ChunkOption = 0
    no_report: NoReportOption = False


class _Reporter(PacedReporter):
    # Score-CAM takes a forward per channel of an image: minutes an image on a CPU.
    command = "cam-eval"
    doing = "scoring"


@app.command("cam-eval")
@boundary
@grouped
def cam_eval(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: CamEvalFlags,
    load: LoadFlags,
    execution: CamEvalExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Score CAMs and attributions: deletion/insertion curves, confidence drop, baselines, sanity.

    Per image and method: the deletion and insertion curves and their areas, the average drop
    and increase in confidence on the map-masked image, and the same for a random map, a
    centred Gaussian and a Sobel edge map; then the maps again as the last blocks are
    re-initialised (a method whose maps do not change is flagged).

    Writes OUT/cam-eval.json, OUT/curves.png, OUT/cam-eval.html and OUT/cases/.
    """
    from actviz.cam_eval import CamEvalOptions
    from actviz.cam_eval import cam_eval as run_cam_eval

    options = own.build(
        CamEvalOptions,
        out=fresh_out(
            own.out, base="actviz-cam-eval", reuse=execution.resume or execution.overwrite
        ),
        load=load,
        execution=execution,
    )
    with reporting(quiet, _Reporter) as reporter:
        result = run_cam_eval(model, inputs, options, reporter=reporter)
    finish(
        result.record,
        lambda: print_cam_eval(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=0 < len(result.failed) == len(result.images),
        verb="scored",
    )


_COLUMNS = ["map", "deletion AUC", "insertion AUC", "avg drop %", "increase", "beats", "sanity"]


def _rows(result: CamEvalResult) -> list[tuple[list[str], bool, bool]]:
    """Per map: its cells, whether it is a baseline, whether the sanity check flagged it."""
    from actviz.gradients.registry import cam_title

    rows = []
    ok = len(result.images) - len(result.failed)
    for name, entry in result.summary.items():
        metrics = entry["metrics"]
        beats = entry.get("beats") or {}
        verdict = " ".join(f"{base}:{v['overall']}" for base, v in beats.items())
        stages = (entry.get("sanity") or {}).get("stages") or []
        last = stages[-1]["spearman"]["mean"] if stages else None
        flagged = bool((entry.get("sanity") or {}).get("flagged"))
        sanity = "-" if last is None else f"{last:.2f}" + (" UNCHANGED" if flagged else "")
        counted = stages[-1].get("images", ok) if stages else ok
        if last is not None and counted < ok:  # constant maps have no ranking to correlate
            sanity += f" ({counted} of {ok})"
        title = cam_title(name) if not entry.get("baseline") else f"({name})"
        rows.append(
            (
                [
                    title,
                    _ci(metrics["deletion_auc"]),
                    _ci(metrics["insertion_auc"]),
                    _ci(metrics["drop_pct"], digits=1),
                    _ci(metrics["increase"], pct=True),
                    verdict,
                    sanity,
                ],
                bool(entry.get("baseline")),
                flagged,
            )
        )
    return rows


def print_cam_eval(result: CamEvalResult) -> None:
    """The verdict table, and what was written."""
    from actviz.cam_eval.summary import MIN_VERDICT_IMAGES, NEGLIGIBLE

    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: these scores describe an untrained model", style="bold red")
        )
    rows = _rows(result)
    if rows:
        ok = len(result.images) - len(result.failed)
        out_console.print(
            f"{ok} image{'' if ok == 1 else 's'}, layer {result.layer}; mean "
            "[95% bootstrap interval]; beats: insertion minus deletion AUC against each "
            "baseline (yes / no / tie; n/a where the images cannot conclude: fewer than "
            f"{MIN_VERDICT_IMAGES}, or areas that differ by less than {NEGLIGIBLE:g})",
            markup=False,
        )
        if out_console.is_terminal:
            table = Table()
            for i, head in enumerate(_COLUMNS):
                table.add_column(head, justify="left" if i in (0, 5) else "right", overflow="fold")
            for cells, baseline, flagged in rows:
                style = "dim" if baseline else ("bold red" if flagged else None)
                table.add_row(*(Text(c) for c in cells), style=style)
            out_console.print(table)
        else:
            print_columns([_COLUMNS, *(cells for cells, _, _ in rows)], left=(0, 5))
    print_written(result.out, result.record, result.chart, result.report)


def _ci(ci: dict[str, Any], *, digits: int = 3, pct: bool = False) -> str:
    from actviz.report.cam_eval import interval

    return interval(ci, digits=digits, pct=pct, sep=",", missing="-")


def _summary(result: CamEvalResult) -> None:
    ok = len(result.images) - len(result.failed)
    rate = rate_words(ok - result.reused, result.seconds)
    print_grid(
        [
            (
                "images",
                f"{ok - result.reused} scored, {result.reused} reused (--resume), "
                f"{len(result.failed)} failed, {len(result.skipped)} non-image skipped",
            ),
            ("methods", ", ".join(result.methods) + f" at {result.layer}"),
            ("time", f"{result.seconds:.1f} s ({rate}) on {result.device}"),
        ]
    )
    for record in result.failed[:5]:
        err_console.print(
            Text.assemble(
                ("  failed ", "bold red"), str(record.get("path")), f": {record.get('error')}"
            )
        )
