"""``actviz ablate``: knock units, dictionary features or a direction out of one layer and
measure what each class loses, over a folder.

The per-class table on stdout (a rich table on a terminal, plain columns when piped, or
``ablate.json`` with ``--json``); progress and the summary on stderr; exit 4 when a class
crosses ``--fail-on``. Torch is imported inside the command, never here.
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
    error,
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
from actviz.errors import ExitCode

if TYPE_CHECKING:
    from actviz.ablate import AblateResult

__all__ = ["ablate"]

_WHAT = "What to remove"
_HOW = "How"


def _option(*names: str, panel: str = _WHAT, **kwargs: Any) -> Any:
    """A Typer option of ablate's, in its help panel, its default said in its help."""
    return typer.Option(*names, rich_help_panel=panel, **kwargs)


LayerOption = Annotated[
    str,
    _option(
        "--layer",
        "-l",
        help="The one module whose output is edited: its name (layer3), or a selector that "
        "matches one module.",
    ),
]
UnitsOption = Annotated[
    str | None,
    _option("--units", "-u", help="Channels to remove: 17,42 or ranges (0-63)."),
]
SaeOption = Annotated[
    Path | None,
    _option(
        "--sae",
        help="A dictionary actviz sae trained on this layer (sae.safetensors, or its folder); "
        "--features names its features.",
    ),
]
FeaturesOption = Annotated[
    str | None,
    _option(
        "--features",
        help="The dictionary's features to remove: 5,9 or ranges. The layer is rebuilt with "
        "their codes changed and the dictionary's reconstruction error passed through.",
    ),
]
DirectionOption = Annotated[
    Path | None,
    _option(
        "--direction",
        help="A vector of the layer's channel length (.npy, or .safetensors holding one "
        "tensor): its component is removed (a concept vector, a probe's weights).",
    ),
]
EachOption = Annotated[
    bool,
    _option(
        "--each",
        help="Remove every listed unit (or feature) on its own: one result each, ranked per "
        "class, and the curves of each class as its N most and least important are removed "
        "together.",
    ),
]
ModeOption = Annotated[
    str,
    _option(
        "--mode",
        "-m",
        panel=_HOW,
        help="zero, mean (the folder's mean, per position), resample (another image's "
        "value, seeded), scale:A (times A) or steer:A (A times the direction added).",
    ),
]
LabelsOption = Annotated[
    str | None,
    _option(
        "--labels",
        panel=_HOW,
        help="Each image's class: folders (class subfolders, matched to the model's class "
        "names or numbered in sorted order as ImageFolder does), FILE.csv (image,label "
        "rows), or none (agreement with the model's own predictions). \\[default: folders "
        "when every image is in a subfolder, else none]",
        show_default=False,
    ),
]
RankShareOption = Annotated[
    float,
    _option(
        "--rank-share",
        panel=_HOW,
        help="With --each: the share of each class's images that rank its units; the curves "
        "are measured on the rest.",
    ),
]
SeedOption = Annotated[
    int,
    _option("--seed", panel=_HOW, help="Seed of resample's donors and the ranking split."),
]
CasesOption = Annotated[
    int,
    _option(
        "--cases",
        panel="Output",
        min=0,
        help="The most affected images drawn with their Grad-CAM before and after (0: none).",
    ),
]
NoShortcutOption = Annotated[
    bool,
    _option(
        "--no-shortcut",
        panel=_HOW,
        help="Run every ablation through the rest of the model even where the layer reaches "
        "a linear classifier through global pooling (where one product gives the same "
        "logits).",
    ),
]
AblateFailOnOption = Annotated[
    str | None,
    _option(
        "--fail-on",
        panel="Diagnostics",
        metavar="RULE",
        help="Exit 4 when a class of an ablation crosses RULE: METRIC<VALUE or >, with dacc, "
        "dbalanced (after minus before), dlogit or acc; e.g. 'dacc<-0.2', a class losing "
        "more than 20 points.",
    ),
]
AblateOutOption = Annotated[Path | None, fresh_out_option("actviz-ablate", holding="earlier files")]
AblateExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address", "amp"), replace={"workers": DecodeWorkersOption}),
]


class _Reporter(PacedReporter):
    command = "ablate"


@dataclass(frozen=True, kw_only=True)
class AblateFlags(OptionsFlags):
    """``ablate``'s own options: the fields of :class:`actviz.ablate.AblateOptions`; ``--layer``
    is required."""

    placed: ClassVar[Mapping[str, str]] = {"no_shortcut": "execution"}

    layer: LayerOption
    units: UnitsOption = None
    sae: SaeOption = None
    features: FeaturesOption = None
    direction: DirectionOption = None
    each: EachOption = False
    mode: ModeOption = "zero"
    labels: LabelsOption = None
    rank_share: RankShareOption = 0.5
    seed: SeedOption = 0
    out: AblateOutOption = None
    cases: CasesOption = 6
    no_shortcut: NoShortcutOption = False
    fail_on: AblateFailOnOption = None
    no_report: NoReportOption = False


@app.command("ablate")
@boundary
@grouped
def ablate(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: AblateFlags,
    load: LoadFlags,
    execution: AblateExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Remove units, dictionary features or a direction from one layer; what each class loses.

    Over a folder (class subfolders give the labels): per class the image count, accuracy
    and balanced accuracy before and after, the mean change of the class's logit, and which
    classes take the lost images; the most affected images with their Grad-CAM before and
    after. With --each, every unit on its own, ranked per class, and each class's accuracy
    as its most (and least) important units are removed together.

    Writes OUT/ablate.json, OUT/ablate.parquet, OUT/ablate.html, OUT/classes.png and
    OUT/cases/ (OUT/curves.png with --each).
    """
    from actviz.ablate import AblateOptions
    from actviz.ablate import ablate as run_ablate

    options = own.build(
        AblateOptions,
        out=fresh_out(own.out, base="actviz-ablate", reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    with reporting(quiet, _Reporter) as reporter:
        result = run_ablate(model, inputs, options, reporter=reporter)
    failed = len(result.failed)
    finish(
        result.record,
        lambda: print_ablate(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=0 if result.crossed else failed,
        none_done=result.images == 0 < failed,
        verb="scored",
    )
    if result.crossed:
        worst = result.crossed[0]
        error(
            f"--fail-on {result.fail_on['rule'] if result.fail_on else ''}: "
            f"{len(result.crossed)} class(es) crossed it; worst: {worst['class']} under "
            f"{worst['ablation']} ({worst['value']:+.4g})"
        )
        raise typer.Exit(int(ExitCode.ANOMALY))


#: Rows of a sweep's table on the terminal: its ablations that lost most.
SHOWN = 20


def _cell(value: float | None, points: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if points else f"{value:.1%}"


def _rows(result: AblateResult) -> tuple[list[str], list[list[str]]]:
    agree = result.labels == "agreement"
    word = "agree" if agree else "acc"
    if len(result.ablations) == 1:
        head = ["class", "n", f"{word} before", f"{word} after", "points", "bal. after", "dlogit"]
        rows = sorted(
            result.rows(),
            key=lambda r: ((r["acc_after"] or 0) - (r["acc_before"] or 0), r["class"]),
        )
        return head, [
            [
                str(r["class"]),
                str(r["n"]),
                _cell(r["acc_before"]),
                _cell(r["acc_after"]),
                _cell(None if r["acc_before"] is None else r["acc_after"] - r["acc_before"], True),
                _cell(r["balanced_acc_after"]),
                f"{r['dlogit']:+.4f}",
            ]
            for r in rows
        ]
    head = ["ablation", f"{word} after", "lost", "dlogit", "class hit most", "its points"]
    ranked = result.ranked()
    out = []
    for a in ranked[:SHOWN]:
        rows = result.rows(a["name"])
        worst = min(
            rows,
            key=lambda r: ((r["acc_after"] or 0) - (r["acc_before"] or 0), r["class"]),
            default=None,
        )
        if worst is not None and (worst["acc_after"] or 0) >= (worst["acc_before"] or 0):
            worst = None  # no class lost anything: naming one would point at nothing
        out.append(
            [
                a["name"],
                _cell(a["overall"]["acc_after"]),
                str(a["overall"]["lost"]),
                f"{a['overall'].get('dlogit', 0.0):+.4f}",
                str(worst["class"]) if worst else "-",
                _cell(worst["acc_after"] - worst["acc_before"], True)
                if worst and worst["acc_before"] is not None
                else "-",
            ]
        )
    return head, out


def print_ablate(result: AblateResult) -> None:
    """The per-class table (a sweep's ablations that lost most), and what was written."""
    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: these accuracies describe an untrained model", style="bold red")
        )
    first = result.ablations[0] if result.ablations else None
    if first is not None:
        said = (
            "agreement with the unablated model's predictions (no labels)"
            if result.labels == "agreement"
            else f"labels from {result.labels}"
        )
        what = first["name"] if len(result.ablations) == 1 else f"{len(result.ablations)} ablations"
        out_console.print(
            f"{result.images} images, {what} at {result.layer} ({result.mode}); {said}",
            markup=False,
        )
        head, rows = _rows(result)
        if out_console.is_terminal:
            table = Table()
            for i, name in enumerate(head):
                table.add_column(name, justify="left" if i in (0, 3) else "right")
            for cells in rows:
                table.add_row(*(Text(c) for c in cells))
            out_console.print(table)
        else:
            print_columns([head, *rows], left=(0, 3) if len(result.ablations) > 1 else (0,))
        if len(result.ablations) > SHOWN:
            out_console.print(
                f"({len(result.ablations) - SHOWN} more in ablate.json)", markup=False
            )
    print_written(result.out, result.record, result.table, result.report)


def _summary(result: AblateResult) -> None:
    rate = rate_words(result.images, result.seconds)
    print_grid(
        [
            (
                "images",
                f"{result.images} scored, {len(result.failed)} failed, "
                f"{len(result.skipped)} non-image skipped",
            ),
            (
                "removed",
                f"{len(result.ablations)} ablation(s) at {result.layer}, mode {result.mode}",
            ),
            ("time", f"{result.seconds:.1f} s ({rate}) on {result.device}"),
        ]
    )
    for image, reason in result.failed[:5]:
        err_console.print(Text.assemble(("  failed ", "bold red"), image, f": {reason}"))
