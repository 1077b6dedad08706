"""``actviz label``: what each unit of a layer detects, named from the user's own concepts.

The labelled units and the concepts on stdout (rich tables on a terminal, plain columns when
piped, or ``labels.json`` with ``--json``); progress and the summary on stderr. Torch is
imported inside the command, never here.
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
    JsonOption,
    ModelArg,
    NoReportOption,
    QuietOption,
    fresh_out,
    fresh_out_option,
)

if TYPE_CHECKING:
    from actviz.label import LabelResult

__all__ = ["label", "print_label"]

_PANEL = "Concepts"
_TEST = "Test"

FolderArg = Annotated[
    Path,
    typer.Argument(help="The folder of images (its subfolders are walked).", show_default=False),
]
LayerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--layer",
        "--layers",
        "-l",
        help=(
            "The layer(s) whose units are labelled, as run's --layers takes them. \\[default: "
            "the deepest layer of the architecture's default selection; with --sae, the "
            "dictionary's layer]"
        ),
        show_default=False,
    ),
]
TagsOption = Annotated[
    Path | None,
    typer.Option(
        "--tags",
        help=(
            "A CSV of image,tag rows (several rows, or tags separated by ; in one cell): each "
            "tag a concept. Images by their path relative to FOLDER, or their file name."
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
ClassesOption = Annotated[
    bool,
    typer.Option(
        "--classes", help="FOLDER's subfolders as concepts (classes).", rich_help_panel=_PANEL
    ),
]
MasksOption = Annotated[
    Path | None,
    typer.Option(
        "--masks",
        help=(
            "A folder of pixel masks, MASKS/<concept>/<image path>.png, each of its image's "
            "size: scored by IoU at each unit's top --quantile."
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
ClipOption = Annotated[
    str | None,
    typer.Option(
        "--clip",
        metavar="ARCH@FILE",
        help=(
            "A local open_clip checkpoint (ViT-B-32@clip.bin): CLIP tags each image with its "
            "--clip-top nearest --words (pip install 'actviz[clip]'; never downloads)."
        ),
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
WordsOption = Annotated[
    Path | None,
    typer.Option(
        "--words",
        help="The word list for --clip, one concept a line.",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
ClipTopOption = Annotated[
    int,
    typer.Option(
        "--clip-top", min=1, help="Words CLIP tags each image with.", rich_help_panel=_PANEL
    ),
]
MetricOption = Annotated[
    str,
    typer.Option(
        "--metric",
        help=(
            "What ranks and tests the labels: auprc, f1, pearson, or auc (fails the sanity "
            "checks; said when chosen). With --masks, IoU ranks and this tests presence."
        ),
        rich_help_panel=_TEST,
    ),
]
ScoreOption = Annotated[
    str,
    typer.Option(
        "--score",
        metavar="max|mean",
        help="A unit's score on an image: the max or the mean of its map.",
        rich_help_panel=_TEST,
    ),
]
FireOption = Annotated[
    float,
    typer.Option(
        "--fire",
        help="F1's threshold: a unit fires on its top share of the images by score.",
        rich_help_panel=_TEST,
    ),
]
QuantileOption = Annotated[
    float,
    typer.Option(
        "--quantile",
        help="With --masks: a unit marks its top share of map values over the folder.",
        rich_help_panel=_TEST,
    ),
]
MinIouOption = Annotated[
    float,
    typer.Option(
        "--min-iou",
        help="With --masks: the IoU a label needs beside its significance.",
        rich_help_panel=_TEST,
    ),
]
PermutationsOption = Annotated[
    int,
    typer.Option(
        "--permutations",
        help=(
            "Permutations of the labels per test, at least 1000 (the smallest p-value is "
            "1/(N+1)); tests no permutation reaches get ten times more, round after round."
        ),
        rich_help_panel=_TEST,
    ),
]
MaxPermutationsOption = Annotated[
    int,
    typer.Option(
        "--max-permutations",
        min=0,
        help=(
            "The most permutations a test may get (0: 2 x tests / alpha, enough for one "
            "discovery after Benjamini-Hochberg)."
        ),
        rich_help_panel=_TEST,
    ),
]
AlphaOption = Annotated[
    float,
    typer.Option(
        "--alpha",
        help="False-discovery rate (Benjamini-Hochberg over a layer's units and concepts).",
        rich_help_panel=_TEST,
    ),
]
MinPositivesOption = Annotated[
    int,
    typer.Option(
        "--min-positives",
        min=2,
        help="The fewest positive (and negative) images a concept needs to be tested.",
        rich_help_panel=_TEST,
    ),
]
TopOption = Annotated[
    int, typer.Option("--top", min=1, help="Labels shown per unit, at most.", rich_help_panel=_TEST)
]
SeedOption = Annotated[
    int,
    typer.Option("--seed", help="Seed of the permutations and the probes.", rich_help_panel=_TEST),
]
NoLearnabilityOption = Annotated[
    bool,
    typer.Option(
        "--no-learnability",
        help="Skip the linear probes (concept from the layer vs from the pixels).",
        rich_help_panel=_TEST,
    ),
]
TopImagesOption = Annotated[
    Path | None,
    typer.Option(
        "--top-images",
        help=(
            "A folder actviz top-images wrote for this layer: each label links to the unit's "
            "contact sheet there."
        ),
        rich_help_panel="Output",
        show_default=False,
    ),
]
LabelSaeOption = Annotated[
    Path | None,
    typer.Option(
        "--sae",
        help=(
            "A dictionary actviz sae trained (sae.safetensors, or its folder): its features "
            "are labelled instead of its layer's channels."
        ),
        show_default=False,
    ),
]
LabelOutOption = Annotated[Path | None, fresh_out_option("actviz-label")]
LabelExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address"), replace={"workers": DecodeWorkersOption}),
]


@dataclass(frozen=True)
class LabelFlags(OptionsFlags):
    """``label``'s own options: the fields of :class:`actviz.label.LabelOptions`."""

    placed: ClassVar[Mapping[str, str]] = {"no_report": "execution"}

    layers: LayerOption = None
    tags: TagsOption = None
    classes: ClassesOption = False
    masks: MasksOption = None
    clip: ClipOption = None
    words: WordsOption = None
    clip_top: ClipTopOption = 3
    sae: LabelSaeOption = None
    metric: MetricOption = "auprc"
    score: ScoreOption = "max"
    fire: FireOption = 0.1
    quantile: QuantileOption = 0.005
    min_iou: MinIouOption = 0.04
    permutations: PermutationsOption = 1000
    max_permutations: MaxPermutationsOption = 0
    alpha: AlphaOption = 0.05
    min_positives: MinPositivesOption = 5
    top: TopOption = 3
    seed: SeedOption = 0
    no_learnability: NoLearnabilityOption = False
    top_images: TopImagesOption = None
    out: LabelOutOption = None
    no_report: NoReportOption = False


@app.command("label")
@boundary
@grouped
def label(
    model: ModelArg,
    folder: FolderArg,
    *,
    own: LabelFlags,
    load: LoadFlags,
    execution: LabelExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Name what each unit of a layer detects, from your own concepts.

    Concepts from --tags (a CSV), --classes (subfolders), --masks (pixel masks, scored by
    IoU) or --clip (a local CLIP model's words). Every unit is scored against every concept
    (AUPRC by default, F1 and Pearson beside), tested by 1,000 or more permutations of the
    labels, and corrected by Benjamini-Hochberg over the layer; a unit with nothing
    significant is unlabelled. Per concept, how well a linear probe recovers it from the layer
    and from the pixels. With --sae, a dictionary's features are labelled instead of channels.

    Writes OUT/labels.json, OUT/label.html and a page and a chart per layer in OUT/label/.
    """
    from actviz.label import LabelOptions
    from actviz.label import label as run_label

    options = own.build(
        LabelOptions,
        out=fresh_out(own.out, base="actviz-label", reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    with reporting(quiet) as reporter:
        result = run_label(model, folder, options, reporter=reporter)
    finish(
        result.record,
        lambda: print_label(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=result.images == 0 and bool(result.failed),
        verb="scored",
    )


#: Labelled units printed per layer; labels.json and the page hold every one.
SHOWN = 20
_TITLES = {"auprc": "AUPRC", "f1": "F1", "pearson": "Pearson r", "auc": "AUC", "iou": "IoU"}


def print_label(result: LabelResult) -> None:
    """Per layer the labelled units, then the concepts, and what was written."""
    if result.random_weights:
        out_console.print(
            Text("RANDOM WEIGHTS: these labels describe an untrained model", style="bold red")
        )
    for layer in result.layers:
        labelled = sorted(
            (r for r in layer.records if r["label"] is not None),
            key=lambda r: (-(r["score"] or 0.0), r["unit"]),
        )
        out_console.print(
            f"{layer.key}: {layer.labelled} of {layer.units} {layer.unit}s labelled, "
            f"{layer.units - layer.labelled} unlabelled (q <= {result.alpha})",
            markup=False,
        )
        if labelled:
            title = _TITLES.get(str(labelled[0]["metric"]), str(labelled[0]["metric"]))
            header = [layer.unit, "label", title, "p", "q", "images", "more labels"]
            rows = [
                [
                    str(r["unit"]),
                    str(r["label"]),
                    _num(r["score"]),
                    _num(r["p"]),
                    _num(r["q"]),
                    str(r["positives"]),
                    _more(r),
                ]
                for r in labelled[:SHOWN]
            ]
            _table(header, rows, left=(1, 6))
            if len(labelled) > SHOWN:
                out_console.print(
                    f"  ... and {len(labelled) - SHOWN} more labelled: see labels.json",
                    markup=False,
                )
    _concepts(result)
    print_written(result.out, result.record, result.report)


def _concepts(result: LabelResult) -> None:
    keys = [layer.key for layer in result.layers]
    probe = any(c.get("learnability") for c in result.concepts)
    header = ["concept", "images", "tested", *(f"units {k}" for k in keys)]
    if probe:
        header += ["base", *(f"probe {k}" for k in keys), "probe pixels"]
    rows = []
    for c in result.concepts:
        row = [
            str(c["concept"]),
            str(c["positives"]),
            "yes" if c["tested"] else "no",
            *(str((c.get("units") or {}).get(k, 0)) for k in keys),
        ]
        if probe:
            learn = c.get("learnability") or {}
            row += [
                _num(learn.get("base")),
                *(_num((learn.get("layers") or {}).get(k)) for k in keys),
                _num(learn.get("pixels")),
            ]
        rows.append(row)
    out_console.print(
        "concepts (probe: AUPRC of a cross-validated linear probe; base: a probe that learned "
        "nothing)",
        markup=False,
    )
    _table(header, rows, left=(0, 2))


def _table(header: list[str], rows: list[list[str]], *, left: tuple[int, ...]) -> None:
    if out_console.is_terminal:
        table = Table()
        for i, head in enumerate(header):
            table.add_column(head, justify="left" if i in left else "right", overflow="fold")
        for cells in rows:
            table.add_row(*(Text(c) for c in cells))
        out_console.print(table)
    else:
        print_columns([header, *rows], left=left)


def _more(record: dict[str, Any]) -> str:
    labels = record.get("labels") or []
    text = ", ".join(str(e["concept"]) for e in labels[1:])
    if record.get("more"):
        text += (", " if text else "") + f"+{record['more']}"
    return text or "-"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.3g}" if 0 < abs(v) < 0.01 else f"{v:.3f}"


def _summary(result: LabelResult) -> None:
    rate = rate_words(result.images - result.reused, result.seconds)
    print_grid(
        [
            (
                "images",
                f"{result.images - result.reused} scored, {result.reused} reused (--resume), "
                f"{len(result.failed)} failed, {len(result.skipped)} non-image skipped",
            ),
            ("concepts", f"{len(result.concepts)} from {result.source}"),
            ("time", f"{result.seconds:.1f} s ({rate}) on {result.device}"),
        ]
    )
    for record in result.failed[:5]:
        err_console.print(
            Text.assemble(
                ("  failed ", "bold red"), str(record.get("path")), f": {record.get('error')}"
            )
        )
