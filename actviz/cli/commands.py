"""``actviz run``, ``stats``, ``list-layers`` and ``models``: take the options (declared once, in
``options``, ``draw`` and the groups of ``groups``), call the library, print with rich.

Errors become a one-line message and their exit code in ``boundary``. Torch is imported inside
the commands, never here, so ``actviz --help`` is instant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer

from actviz.cli.boundary import app, boundary, reporting
from actviz.cli.console import (
    PacedReporter,
    error,
    listing_json,
    out_console,
    print_flags,
    print_listing,
    print_run,
    print_summary,
    warn,
)
from actviz.cli.draw import (
    CaptureOption,
    DrawFlags,
    GradientFlags,
    NoImagesOption,
    check_no_images,
)
from actviz.cli.finish import exit_on_failed, print_outcome
from actviz.cli.groups import CheckFlags, ExecutionFlags, Group, LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    DecodeWorkersOption,
    FlowUpdatesOption,
    FramesOption,
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
from actviz.errors import ExitCode

if TYPE_CHECKING:
    from actviz.api import RunResult
    from actviz.run.options import RunOptions

#: The execution options ``run`` offers: --workers decodes only, and there is no --engine.
RunExecution = Annotated[
    ExecutionFlags,
    Group(without=("engine", "ray_address"), replace={"workers": DecodeWorkersOption}),
]
#: A detector's cut for the detections a run records and draws.
ScoreThresholdOption = Annotated[
    float,
    typer.Option(
        "--score-threshold",
        min=0.0,
        max=1.0,
        help=(
            "A detector's detections are recorded (and drawn, detections.png) from this score "
            "up; lower it when an untrained detector finds nothing."
        ),
        rich_help_panel="Detection",
    ),
]
#: Which detection a detector's Grad-CAM explains.
DetectionOption = Annotated[
    int,
    typer.Option(
        "--detection",
        min=1,
        help=(
            "With --cam on a detector: which detection's score Grad-CAM explains "
            "(1: the highest); EigenCAM needs none (detection_cam.png)."
        ),
        rich_help_panel="Detection",
    ),
]
#: ``stats``' --report: unlike run's, the report is written only when asked for.
ReportOption = Annotated[
    bool,
    typer.Option("--report", help="Also write the HTML report.", rich_help_panel="Output"),
]
#: What ``list-layers`` needs of the model: its input, never its weights or device.
ShapeFlags = Annotated[LoadFlags, Group(without=("weights", "device", "trust_checkpoint"))]

__all__ = ["list_layers", "models", "run", "stats"]


@dataclass(frozen=True)
class RunFlags(OptionsFlags):
    """``run``'s own options: the fields of :class:`actviz.run.options.RunOptions` (its
    drawing and gradient options are groups of their own, in :mod:`actviz.cli.draw`)."""

    read_by_command: ClassVar[tuple[str, ...]] = ("no_images",)
    placed: ClassVar[Mapping[str, str]] = {"frames": "load", "no_images": "gradients"}

    layers: LayersOption = None
    out: FreshOutOption = None
    frames: FramesOption = None
    flow_updates: FlowUpdatesOption = None
    capture: CaptureOption = "output"
    sae: SaeFileOption = None
    no_images: NoImagesOption = False
    no_report: NoReportOption = False
    score_threshold: ScoreThresholdOption = 0.5
    detection: DetectionOption = 1


@dataclass(frozen=True)
class StatsFlags(OptionsFlags):
    """``stats``' own options: the fields of :class:`actviz.run.options.RunOptions` that a run
    without pictures takes."""

    placed: ClassVar[Mapping[str, str]] = {"frames": "load", "report": "execution"}

    layers: LayersOption = None
    out: FreshOutOption = None
    frames: FramesOption = None
    flow_updates: FlowUpdatesOption = None
    report: ReportOption = False
    score_threshold: ScoreThresholdOption = 0.5


@app.command()
@boundary
@grouped
def run(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: RunFlags,
    load: LoadFlags,
    draw: DrawFlags,
    execution: RunExecution,
    gradients: GradientFlags,
    checks: CheckFlags,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Run images through MODEL and write one feature-map grid PNG per selected layer.

    Writes grids to OUT/<image>/<NN>_<layer>.png, and OUT/manifest.json, stats.json,
    stats.csv and the report index.html.
    """
    from actviz.api import run as pipeline
    from actviz.run.options import RunOptions

    if own.no_images:
        check_no_images(draw, gradients)
    options = own.build(
        RunOptions,
        out=fresh_out(own.out, reuse=execution.resume or execution.overwrite),
        thresholds=checks.thresholds(),
        load=load,
        draw=draw.options(grids=not own.no_images),
        gradients=gradients,
        execution=execution,
    )
    _execute(
        pipeline,
        model,
        inputs,
        options,
        checks=checks,
        as_json=as_json,
        quiet=quiet,
        kind=_RunReporter,
    )


@app.command()
@boundary
@grouped
def stats(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: StatsFlags,
    load: LoadFlags,
    execution: ExecutionFlags,
    checks: CheckFlags,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Per-layer statistics and anomaly flags only: no pictures, so it is fast.

    Writes OUT/stats.json, OUT/stats.csv and OUT/manifest.json; flags NaN/Inf, dead,
    constant, exploding and vanishing layers.
    """
    from actviz.run.options import DrawOptions, RunOptions
    from actviz.stats import stats as pipeline

    options = own.build(
        RunOptions,
        out=fresh_out(own.out, reuse=execution.resume or execution.overwrite),
        thresholds=checks.thresholds(),
        load=load,
        draw=DrawOptions(grids=False),
        execution=execution,
    )
    _execute(
        pipeline,
        model,
        inputs,
        options,
        checks=checks,
        as_json=as_json,
        quiet=quiet,
        kind=_StatsReporter,
    )


class _RunReporter(PacedReporter):
    # A detector or a video model takes seconds an image on a CPU: a piped run says its pace.
    command = "run"


class _StatsReporter(PacedReporter):
    command = "stats"


def _execute(
    pipeline: Callable[..., RunResult],
    model: str,
    inputs: list[Path],
    options: RunOptions,
    *,
    checks: CheckFlags,
    as_json: bool,
    quiet: bool,
    kind: type[PacedReporter],
) -> None:
    """Run the pipeline (``actviz.run`` or ``actviz.stats``) with a progress bar (``kind``: its
    reporter; plain pace lines where stderr is not a terminal) and a clean stop on SIGTERM,
    then report."""
    kinds = checks.kinds()  # a bad kind fails before any work
    made = not options.out.exists()
    # Inputs that hold no image are refused by the run's opening, before any work.
    with reporting(quiet, kind) as reporter:
        result = pipeline(model, inputs, options, reporter=reporter)
    _finish(result, as_json=as_json, quiet=quiet, fail_kinds=kinds, made=made)


def _finish(
    result: RunResult, *, as_json: bool, quiet: bool, fail_kinds: frozenset[str], made: bool
) -> None:
    """Print what a run did and exit with the code that says how it went (``made``: the run
    created its output folder)."""
    failed = result.count("failed")
    if 0 < failed == len(result.images):  # nothing drawn: no "wrote" line, no folder left
        exit_on_failed(failed, none_done=True, made=result.out if made else None)

    def summary() -> None:
        print_summary(result)
        print_flags(result)

    print_outcome(result.manifest, lambda: print_run(result), summary, as_json=as_json, quiet=quiet)
    counts = result.flag_counts() if fail_kinds else {}
    fired = sorted(kind for kind in fail_kinds if counts.get(kind))
    if fired:
        hits = result.flags(fired)
        images = sum(counts[kind] for kind in fired)
        first = ""
        if hits:  # the most severe one
            image, flag = hits[0]
            first = f"; worst: {flag.kind} in layer {flag.layer} of {image} ({flag.message})"
        error(f"--fail-on: {images} image flag(s) ({', '.join(fired)}){first}")
        raise typer.Exit(int(ExitCode.ANOMALY))
    exit_on_failed(failed, none_done=False)  # nothing done was handled above


@app.command("list-layers")
@boundary
@grouped
def list_layers(
    model: ModelArg,
    *,
    layers: LayersOption = None,
    load: ShapeFlags,
    as_json: JsonOption = False,
) -> None:
    """List every module of MODEL with its output shape; mark what --layers selects.

    Shapes come from a forward on the meta device: no weights are loaded or downloaded (your
    own model falls back to a forward on zeros on the CPU if it cannot run on the meta device).
    """
    from actviz.api import list_layers as list_model_layers

    listing = list_model_layers(
        model,
        layers=layers or None,
        input_size=load.size(),
        in_chans=load.in_chans,
    )
    if as_json:
        out_console.print_json(data=listing_json(listing))
        return
    print_listing(listing)


@app.command()
@boundary
def models(
    pattern: Annotated[
        str | None, typer.Argument(help="Glob (resnet*) or substring to filter by.")
    ] = None,
    include_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help=(
                "A table of every name with its family and whether run takes it (RUN yes/no); "
                "for timm, each pretrained tag too."
            ),
        ),
    ] = False,
    family: Annotated[
        str | None,
        typer.Option(
            "--family",
            help=(
                "Only this family: classification, segmentation, detection, video, "
                "optical_flow or quantized."
            ),
        ),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            help=(
                "The model source to list: torchvision (plain names), timm (timm/NAME) or hf "
                "(hf:ID, the models in the local Hugging Face cache; a save_pretrained folder "
                "runs as hf:FOLDER without being listed). Your own file.py:factory models "
                "are not listed."
            ),
        ),
    ] = "torchvision",
    as_json: JsonOption = False,
) -> None:
    """List the model names of a source (torchvision by default) that actviz can run.

    MODEL is a torchvision name (resnet34), timm/NAME, hf:FOLDER_OR_ID, or file.py:factory.
    """
    from actviz.models.registry import list_models

    entries = list_models(pattern, include_all=include_all, source=source, family=family)
    if as_json:
        out_console.print_json(
            data=[{"name": e.name, "family": e.family, "runnable": e.runnable} for e in entries]
        )
        return
    if not entries:
        warn(_nothing_listed(source, pattern, family, include_all))
        raise typer.Exit(int(ExitCode.ERROR))
    if not include_all:  # every one of these runs: names only, one per line
        for entry in entries:
            out_console.print(entry.name, markup=False)
        return
    width = max(len("NAME"), *(len(e.name) for e in entries))
    family_width = max(len("FAMILY"), *(len(e.family) for e in entries))
    out_console.print(f"{'NAME':<{width}}  {'FAMILY':<{family_width}}  RUN", markup=False)
    for entry in entries:
        runs = "yes" if entry.runnable else "no"
        out_console.print(
            f"{entry.name:<{width}}  {entry.family:<{family_width}}  {runs}", markup=False
        )


def _nothing_listed(source: str, pattern: str | None, family: str | None, include_all: bool) -> str:
    """Why ``actviz models`` lists nothing, and what to do about it."""
    if pattern is not None:
        return f"no {source} model name matches '{pattern}'"
    if family is not None:
        return f"no {source} model of the {family} family" + (
            "" if include_all else " that run takes (--all lists every one)"
        )
    if source == "hf":
        from huggingface_hub.constants import HF_HUB_CACHE

        return (
            f"the local Hugging Face cache ({HF_HUB_CACHE}) holds no models; on a connected "
            "machine run `hf download ORG/NAME` and copy the cache here, or run a folder "
            "that save_pretrained wrote as hf:FOLDER"
        )
    if source == "factory":
        return "your own file.py:factory models are not listed: name one as MODEL"
    return f"the {source} source lists no models"
