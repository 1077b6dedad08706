"""``actviz tcav``: does a concept move a class? TCAV over runs, against random vectors, tested.

The scores on stdout (a rich table on a terminal, plain columns when piped, or ``tcav.json``
with ``--json``); progress and the summary on stderr. Torch is imported inside the command,
never here.
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
from actviz.cli.console import err_console, out_console, print_columns, print_grid, print_written
from actviz.cli.finish import finish
from actviz.cli.groups import ExecutionFlags, Group, LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    DecodeWorkersOption,
    JsonOption,
    ModelArg,
    NoReportOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.tcav import TcavResult

__all__ = ["print_tcav", "tcav"]

_PANEL = "Concepts"

InputsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Images of the classes (folders or files), for each --target without its own =DIR.",
        show_default=False,
    ),
]
LayerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--layer",
        "--layers",
        "-l",
        help=(
            "The one layer the concept vectors live in, as run's --layers takes it. "
            "\\[default: the deepest layer of the architecture's default selection]"
        ),
        show_default=False,
    ),
]
ConceptOption = Annotated[
    list[str],
    typer.Option(
        "--concept",
        metavar="NAME=DIR",
        help="A concept and the folder of its images (repeat for more concepts).",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
RandomOption = Annotated[
    list[Path],
    typer.Option(
        "--random",
        metavar="DIR",
        help=(
            "Folder(s) of random images: each run's negatives, and the random vectors the "
            "concepts are tested against (at least twice a run's draw)."
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
TargetOption = Annotated[
    list[str],
    typer.Option(
        "--target",
        metavar="CLASS[=DIR]",
        help=(
            "A class (an index or the model's class name), and optionally the folder of its "
            "images (else INPUTS). Repeat for more classes."
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
CavOption = Annotated[
    str,
    typer.Option(
        "--cav",
        metavar="fast|linear",
        help=(
            "How the vectors are found: fast (FastCAV, closed form) or linear (a linear SVM by "
            "SGD, as TCAV and captum; pip install 'actviz[tcav]')."
        ),
        rich_help_panel="Test",
    ),
]
RunsOption = Annotated[
    int,
    typer.Option(
        "--runs",
        help="Vectors per concept, each against another random draw.",
        rich_help_panel="Test",
    ),
]
PerRunOption = Annotated[
    int,
    typer.Option(
        "--per-run",
        help="Images of each set a run draws (0: the concept's, at most half the random images).",
        rich_help_panel="Test",
    ),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Seed of the draws and of the test.", rich_help_panel="Test")
]
AlphaOption = Annotated[
    float,
    typer.Option(
        "--alpha",
        help="False-discovery rate (Benjamini-Hochberg over concepts and classes).",
        rich_help_panel="Test",
    ),
]
TcavOutOption = Annotated[Path | None, fresh_out_option("actviz-tcav")]
TcavExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address", "amp"), replace={"workers": DecodeWorkersOption}),
]


@dataclass(frozen=True, kw_only=True)
class TcavFlags(OptionsFlags):
    """``tcav``'s own options: the fields of :class:`actviz.tcav.TcavOptions`; a concept, the
    random images and a class are required."""

    placed: ClassVar[Mapping[str, str]] = {"no_report": "execution"}
    renamed: ClassVar[Mapping[str, str]] = {"concept": "concepts", "target": "targets"}

    layers: LayerOption = None
    concept: ConceptOption
    random: RandomOption
    target: TargetOption
    cav: CavOption = "fast"
    runs: RunsOption = 20
    per_run: PerRunOption = 0
    seed: SeedOption = 0
    alpha: AlphaOption = 0.05
    out: TcavOutOption = None
    no_report: NoReportOption = False


@app.command("tcav")
@boundary
@grouped
def tcav(
    model: ModelArg,
    inputs: InputsArg = None,
    *,
    own: TcavFlags,
    load: LoadFlags,
    execution: TcavExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Does a concept move a class? TCAV over runs, against random vectors, tested.

    For each concept, --runs concept activation vectors at the layer (FastCAV by default),
    each from the concept's images against another random draw; each vector's TCAV score for
    a class is the share of the class's images whose score rises along it. As many vectors
    between two random draws give the scores of no concept; a two-sided test says whether the
    concept's differ. The vectors are saved (one .npy per concept) for actviz ablate
    --direction.

    Writes OUT/tcav.json, OUT/tcav.html, OUT/tcav.png and OUT/cavs/.
    """
    from actviz.tcav import TcavOptions
    from actviz.tcav import tcav as run_tcav

    options = own.build(
        TcavOptions,
        out=fresh_out(own.out, base="actviz-tcav", reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    with reporting(quiet) as reporter:
        result = run_tcav(model, inputs or None, options, reporter=reporter)
    finish(
        result.record,
        lambda: print_tcav(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=False,
        verb="read",
    )


def print_tcav(result: TcavResult) -> None:
    """The scores, and what was written."""
    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: these scores describe an untrained model", style="bold red")
        )
    out_console.print(
        f"{result.layer}: {result.runs} runs of {result.cav} vectors per concept; score: mean "
        "+- sd over the runs; random: the random vectors'",
        markup=False,
    )
    header = ["concept", "class", "score", "random", "p", "q", "significant"]
    rows = [
        [
            str(s["concept"]),
            f"{s['target_name'] or 'class'} ({s['target']})",
            f"{_num(s['score'])} +- {_num(s['spread'])}",
            f"{_num(s['random'])} +- {_num(s['random_spread'])}",
            _num(s["p"]),
            _num(s["q"]),
            "yes" if s["significant"] else "no",
        ]
        for s in result.scores
    ]
    if out_console.is_terminal:
        table = Table()
        for i, head in enumerate(header):
            table.add_column(head, justify="left" if i in (0, 1, 6) else "right")
        for cells in rows:
            table.add_row(*(Text(c) for c in cells))
        out_console.print(table)
    else:
        print_columns([header, *rows], left=(0, 1, 6))
    print_written(result.out, result.record, result.chart, result.report, more=["cavs/"])


def _num(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.3g}" if 0 < abs(v) < 0.01 else f"{v:.3f}"


def _summary(result: TcavResult) -> None:
    print_grid(
        [
            (
                "images",
                f"{result.images} class images, {result.reused} reused (--resume), "
                f"{len(result.failed)} failed",
            ),
            ("vectors", ", ".join(f"{c['concept']}: {c['vector']}" for c in result.concepts)),
            ("time", f"{result.seconds:.1f} s on {result.device}"),
        ]
    )
    for record in result.failed[:5]:
        err_console.print(
            Text.assemble(
                ("  failed ", "bold red"), str(record.get("path")), f": {record.get('error')}"
            )
        )
