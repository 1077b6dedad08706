"""The ``actviz`` command: parse options, call the library, print with rich.

This is the one error boundary: :class:`~actviz.errors.ActvizError` becomes a one-line message on
stderr and its exit code (a traceback only with ``--debug``). Torch is imported inside the
commands, never here, so ``actviz --help`` is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from actviz.cli.boundary import (
    app,
    boundary,
    load_options,
    pair,
    reporting,
    thresholds,
)
from actviz.cli.console import (
    error,
    listing_json,
    out_console,
    print_flags,
    print_listing,
    print_run,
    print_summary,
    warn,
)
from actviz.cli.options import (
    AmpOption,
    BatchSizeOption,
    CamClassesOption,
    CamOption,
    CaptureOption,
    ChannelsLastOption,
    ClipOption,
    CmapOption,
    DecodeWorkersOption,
    DeviceOption,
    EngineOption,
    FailOnOption,
    GradsOption,
    InChansOption,
    InputsArg,
    InputSizeOption,
    JsonOption,
    LayersOption,
    LayoutOption,
    MaxChannelsOption,
    ModelArg,
    NoImagesOption,
    NoReportOption,
    NormOption,
    OutOption,
    OverlayChannelOption,
    OverlayOption,
    OverwriteOption,
    PcaMaskOption,
    PngCompressionOption,
    QuietOption,
    RayAddressOption,
    ResumeOption,
    SaveTensorsOption,
    SortOption,
    TargetOption,
    TensorFormatOption,
    ThresholdOption,
    TrustCheckpointOption,
    ViewOption,
    WeightsOption,
    WorkersOption,
)
from actviz.errors import ExitCode

if TYPE_CHECKING:
    from actviz.api import RunResult
    from actviz.run.options import RunOptions

__all__ = ["list_layers", "models", "run", "stats"]


@app.command()
@boundary
def run(
    model: ModelArg,
    inputs: InputsArg,
    layers: LayersOption = None,
    out: OutOption = Path("actviz-out"),
    weights: WeightsOption = "auto",
    device: DeviceOption = "auto",
    capture: CaptureOption = "output",
    layout: LayoutOption = "auto",
    max_channels: MaxChannelsOption = 64,
    sort: SortOption = "index",
    norm: NormOption = "channel",
    clip: ClipOption = None,
    cmap: CmapOption = None,
    overlay: OverlayOption = False,
    overlay_channel: OverlayChannelOption = None,
    view: ViewOption = None,
    pca_mask: PcaMaskOption = False,
    save_tensors: SaveTensorsOption = False,
    tensor_format: TensorFormatOption = None,
    png_compression: PngCompressionOption = 1,
    batch_size: BatchSizeOption = 8,
    workers: DecodeWorkersOption = 0,
    amp: AmpOption = False,
    channels_last: ChannelsLastOption = False,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    trust_checkpoint: TrustCheckpointOption = False,
    input_size: InputSizeOption = None,
    in_chans: InChansOption = 3,
    grads: GradsOption = False,
    target: TargetOption = "top1",
    cam: CamOption = False,
    cam_classes: CamClassesOption = 1,
    no_images: NoImagesOption = False,
    no_report: NoReportOption = False,
    fail_on: FailOnOption = None,
    threshold: ThresholdOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Run images through MODEL and write one feature-map grid PNG per selected layer.

    Writes grids to OUT/<image>/<NN>_<layer>.png, and OUT/manifest.json, stats.json,
    stats.csv and the report index.html.
    """
    from actviz.command.options import ExecutionOptions
    from actviz.run.options import DrawOptions, GradientOptions, RunOptions

    options = RunOptions(
        layers=",".join(layers) if layers else None,
        out=out,
        capture=capture,
        thresholds=thresholds(threshold),
        report=not no_report,
        load=load_options(weights, device, trust_checkpoint, input_size, in_chans),
        draw=DrawOptions(
            max_channels=max_channels,
            order=sort,
            norm=norm,
            clip=pair(clip, "--clip", float) if clip else None,
            cmap=cmap,
            layout=layout,
            overlay=overlay or overlay_channel is not None,
            overlay_channel=overlay_channel,
            save_tensors=tensor_format or ("npy" if save_tensors else None),
            png_compression=png_compression,
            grids=not no_images,
            pca=_views(view),
            pca_mask=pca_mask,
        ),
        gradients=GradientOptions(grads=grads, target=target, cam=cam, cam_classes=cam_classes),
        execution=ExecutionOptions(
            batch_size=batch_size,
            workers=workers,
            amp=amp,
            channels_last=channels_last,
            resume=resume,
            overwrite=overwrite,
        ),
    )
    _execute(model, inputs, options, fail_on=fail_on, as_json=as_json, quiet=quiet)


def _views(views: list[str] | None) -> bool:
    """``--view`` values -> whether the PCA view is drawn."""
    from actviz.errors import UsageError

    chosen = {v.strip().lower() for view in views or [] for v in view.split(",") if v.strip()}
    unknown = chosen - {"pca", "grid"}
    if unknown:
        raise UsageError(f"--view takes pca (or grid, always drawn), not '{sorted(unknown)[0]}'")
    return "pca" in chosen


@app.command()
@boundary
def stats(
    model: ModelArg,
    inputs: InputsArg,
    layers: LayersOption = None,
    out: OutOption = Path("actviz-out"),
    weights: WeightsOption = "auto",
    device: DeviceOption = "auto",
    batch_size: BatchSizeOption = 8,
    workers: WorkersOption = 0,
    engine: EngineOption = "local",
    ray_address: RayAddressOption = None,
    amp: AmpOption = False,
    channels_last: ChannelsLastOption = False,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    trust_checkpoint: TrustCheckpointOption = False,
    input_size: InputSizeOption = None,
    in_chans: InChansOption = 3,
    report: Annotated[
        bool,
        typer.Option("--report", help="Also write the HTML report.", rich_help_panel="Output"),
    ] = False,
    fail_on: FailOnOption = None,
    threshold: ThresholdOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Per-layer statistics and anomaly flags only: no pictures, so it is fast.

    Writes OUT/stats.json, OUT/stats.csv and OUT/manifest.json; flags NaN/Inf, dead,
    constant, exploding and vanishing layers.
    """
    from actviz.command.options import ExecutionOptions
    from actviz.run.options import DrawOptions, RunOptions

    options = RunOptions(
        layers=",".join(layers) if layers else None,
        out=out,
        thresholds=thresholds(threshold),
        report=report,
        load=load_options(weights, device, trust_checkpoint, input_size, in_chans),
        draw=DrawOptions(grids=False),
        execution=ExecutionOptions(
            batch_size=batch_size,
            workers=workers,
            amp=amp,
            channels_last=channels_last,
            resume=resume,
            overwrite=overwrite,
            engine=engine,
            ray_address=ray_address,
        ),
    )
    _execute(model, inputs, options, fail_on=fail_on, as_json=as_json, quiet=quiet)


def _execute(
    model: str,
    inputs: list[Path],
    options: RunOptions,
    *,
    fail_on: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run the pipeline with a progress bar and a clean stop on SIGTERM, then report."""
    from actviz.api import run as run_pipeline
    from actviz.stats import parse_kinds

    kinds = parse_kinds(fail_on) if fail_on else frozenset()  # a bad kind fails before work
    with reporting(quiet) as reporter:
        result = run_pipeline(model, inputs, options, reporter=reporter)
    _finish(result, as_json=as_json, quiet=quiet, fail_kinds=kinds)


def _finish(result: RunResult, *, as_json: bool, quiet: bool, fail_kinds: frozenset[str]) -> None:
    """Print what a run did and exit with the code that says how it went."""
    if as_json:
        out_console.print_json(result.manifest.read_text(encoding="utf-8"))
    else:
        print_run(result)
    if not quiet:
        print_summary(result)
        print_flags(result)
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
    failed = result.count("failed")
    if failed:
        if failed == len(result.images):
            error(f"no image could be read ({failed} failed); see messages above")
            raise typer.Exit(int(ExitCode.ERROR))
        raise typer.Exit(int(ExitCode.PARTIAL))


@app.command("list-layers")
@boundary
def list_layers(
    model: ModelArg,
    layers: LayersOption = None,
    input_size: InputSizeOption = None,
    in_chans: InChansOption = 3,
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
        input_size=pair(input_size, "--input-size", int) if input_size else None,
        in_chans=in_chans,
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
        typer.Option("--all", help="Also list detection, video and other model families."),
    ] = False,
    source: Annotated[
        str, typer.Option("--source", help="The model source to list: torchvision.")
    ] = "torchvision",
    as_json: JsonOption = False,
) -> None:
    """List the model names of a source (torchvision by default) that actviz can run."""
    from actviz.models.registry import list_models

    entries = list_models(pattern, include_all=include_all, source=source)
    if as_json:
        out_console.print_json(
            data=[{"name": e.name, "family": e.family, "runnable": e.runnable} for e in entries]
        )
        return
    if not entries:
        warn(f"no model name matches '{pattern}'")
        raise typer.Exit(int(ExitCode.ERROR))
    if not include_all:  # every one of these runs: names only, one per line
        for entry in entries:
            out_console.print(entry.name, markup=False)
        return
    width = max(len(e.name) for e in entries)
    family_width = max(len(e.family) for e in entries)
    out_console.print(f"{'NAME':<{width}}  {'FAMILY':<{family_width}}  RUN", markup=False)
    for entry in entries:
        runs = "yes" if entry.runnable else "no"
        out_console.print(
            f"{entry.name:<{width}}  {entry.family:<{family_width}}  {runs}", markup=False
        )
