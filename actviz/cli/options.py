"""Command-line options shared by several commands, declared once; a command's own options
live with it (run's pictures in ``draw``), and the groups of them in ``groups``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

__all__ = [
    "fresh_out",
    "AmpOption",
    "BatchSizeOption",
    "FlowUpdatesOption",
    "FramesOption",
    "ChannelsLastOption",
    "DecodeWorkersOption",
    "DeviceOption",
    "EngineOption",
    "FailOnOption",
    "InChansOption",
    "InputSizeOption",
    "InputsArg",
    "JsonOption",
    "LayersOption",
    "MaxChannelsOption",
    "ModelArg",
    "NoReportOption",
    "FreshOutOption",
    "fresh_out_option",
    "OverwriteOption",
    "PngCompressionOption",
    "QuietOption",
    "RayAddressOption",
    "ResumeOption",
    "ThresholdOption",
    "TrustCheckpointOption",
    "WeightsOption",
    "WorkersOption",
]

LayersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--layers",
        "-l",
        help=(
            "Which layers: a type alias (conv, relu, bn, norm, pool, linear, act, attn), a "
            "class name (Conv2d), a glob (layer4.*), re:REGEX, an exact name, all, or !TERM "
            "to exclude. Comma-separate or repeat."
        ),
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout instead.")
]
ModelArg = Annotated[
    str,
    typer.Argument(
        help="A torchvision name (resnet34), timm/NAME (timm/convnext_tiny), hf:FOLDER_OR_ID "
        "(a save_pretrained folder or a model in the local Hugging Face cache), or your own "
        "package.module:factory or path/to/file.py:factory (runs that code)."
    ),
]

InputsArg = Annotated[
    list[Path], typer.Argument(help="Image files and/or folders.", show_default=False)
]


def fresh_out_option(
    base: str,
    *,
    holding: str = "an earlier run's files",
    unless: str = "neither --resume nor --overwrite is given",
) -> Any:
    """``--out`` of a command that refuses a folder holding earlier files: left out, it is the
    first free one of ``base``, ``base``-2, ... (:func:`fresh_out`)."""
    return typer.Option(
        "--out",
        "-o",
        help=(
            f"Output folder. \\[default: {base}, or the first free {base}-2, -3, ... when it holds "
            f"{holding} and {unless}]"
        ),
        show_default=False,
        rich_help_panel="Output",
    )


#: ``--out`` of a command that refuses a folder holding an earlier run's files: left out, it
#: is the first free one of actviz-out, actviz-out-2, ... so runs in a row never collide.
FreshOutOption = Annotated[Path | None, fresh_out_option("actviz-out")]


def fresh_out(
    out: Path | None,
    *,
    base: str = "actviz-out",
    reuse: bool = False,
    resumable: bool = True,
    taken: Callable[[Path], bool] | None = None,
    holding: str = "an earlier run's files",
) -> Path:
    """``--out`` as given; left out, ``base`` when it is free or the run reuses it (``reuse``:
    --resume or --overwrite), else the first free ``base-2``, ``base-3``, ... said on stderr
    (``resumable``: whether the command has ``--resume`` to name). A folder is free when
    ``taken`` says no: by default, when it is missing or empty."""
    if out is not None:
        return out
    is_taken = taken or _holds_files
    chosen, n = Path(base), 1
    while not reuse and is_taken(chosen):
        n += 1
        chosen = Path(f"{base}-{n}")
    if n > 1:
        from actviz.cli.console import warn

        later = f"; add --out {chosen} --resume to go on with this run later" if resumable else ""
        warn(f"{base} holds {holding}; writing to {chosen} (--out chooses the folder{later})")
    return chosen


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


WeightsOption = Annotated[
    str,
    typer.Option(
        "--weights",
        "-w",
        help=(
            "auto (pretrained if cached or downloadable, else random with a warning), "
            "default or an enum name such as IMAGENET1K_V2 (required), none (random), "
            "or a state_dict checkpoint file (.pt/.pth/.safetensors)."
        ),
        rich_help_panel="Model",
    ),
]

DeviceOption = Annotated[
    str,
    typer.Option("--device", "-d", help="auto, cpu, cuda, cuda:N or mps.", rich_help_panel="Model"),
]

BatchSizeOption = Annotated[
    int,
    typer.Option(
        "--batch-size", "-b", min=1, help="Images per forward pass.", rich_help_panel="Speed"
    ),
]

WorkersOption = Annotated[
    int,
    typer.Option(
        "--workers",
        "-j",
        min=0,
        help=(
            "Decoding processes (0: one background thread); with --engine ray, the actor pool "
            "size (0: 2)."
        ),
        rich_help_panel="Speed",
    ),
]
#: ``--workers`` of the commands without ``--engine`` (run, diff): decoding only.
DecodeWorkersOption = Annotated[
    int,
    typer.Option(
        "--workers",
        "-j",
        min=0,
        help="Decoding processes (0: one background thread).",
        rich_help_panel="Speed",
    ),
]

EngineOption = Annotated[
    Literal["local", "ray"],
    typer.Option(
        "--engine",
        help=(
            "local: this process; ray: per-image summaries on a pool of Ray actors, merged into "
            "the same files (pip install 'actviz\\[ray]')."
        ),
        rich_help_panel="Speed",
    ),
]

RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="ADDR",
        help=(
            "With --engine ray: the cluster to join (auto: the one `ray start` runs here); "
            "without it, a local Ray instance is started."
        ),
        rich_help_panel="Speed",
        show_default=False,
    ),
]

AmpOption = Annotated[
    bool,
    typer.Option(
        "--amp",
        help="Autocast the forward (bfloat16 on CPU, float16 on CUDA); drawn in float32.",
        rich_help_panel="Speed",
    ),
]

ChannelsLastOption = Annotated[
    bool,
    typer.Option("--channels-last", help="Channels-last memory format.", rich_help_panel="Speed"),
]

ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Finish an earlier run in OUT: skip images it completed with the same settings.",
        rich_help_panel="Output",
    ),
]

OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="Replace an earlier run's outputs in OUT.", rich_help_panel="Output"
    ),
]

TrustCheckpointOption = Annotated[
    bool,
    typer.Option(
        "--trust-checkpoint",
        help="Load a checkpoint that needs full unpickling: this runs code from the file.",
        rich_help_panel="Model",
    ),
]

InputSizeOption = Annotated[
    str | None,
    typer.Option(
        "--input-size",
        metavar="H,W",
        help="Model input size, for models that do not take 224 x 224.",
        rich_help_panel="Model",
    ),
]

FramesOption = Annotated[
    int | None,
    typer.Option(
        "--frames",
        min=1,
        help="Frames per clip for a video model (default: the weights' recipe, 16 mostly).",
        rich_help_panel="Model",
    ),
]

FlowUpdatesOption = Annotated[
    int | None,
    typer.Option(
        "--flow-updates",
        min=1,
        help="Refinement iterations of an optical-flow model (default: its own, 12).",
        rich_help_panel="Model",
    ),
]

InChansOption = Annotated[
    Literal[1, 3],
    typer.Option(
        "--in-chans",
        help="Input channels the model takes: 3 (RGB) or 1 (greyscale).",
        rich_help_panel="Model",
    ),
]

QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar or summary on stderr.")
]
FailOnOption = Annotated[
    str | None,
    typer.Option(
        "--fail-on",
        metavar="KINDS",
        help=(
            "Exit with code 4 when an anomaly of these kinds is flagged: nan, inf, dead, "
            "constant, exploding, vanishing, or all (comma-separated)."
        ),
        rich_help_panel="Diagnostics",
    ),
]
ThresholdOption = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold",
        metavar="NAME=VALUE",
        help=(
            "Change an anomaly threshold: dead_frac (0.5), explode_ratio (10), vanish_ratio "
            "(0.1), constant_rtol (1e-6). Repeat for several."
        ),
        rich_help_panel="Diagnostics",
        show_default=False,
    ),
]

MaxChannelsOption = Annotated[
    int,
    typer.Option(
        "--channels",
        "--max-channels",
        "-c",
        min=0,
        help="Channels drawn per grid at most (0 = all).",
        rich_help_panel="Grid",
    ),
]

PngCompressionOption = Annotated[
    int,
    typer.Option(
        "--png-compression",
        min=0,
        max=9,
        help="Deflate level of the PNGs, 0-9: 1 is fast, 9 is smallest.",
        rich_help_panel="Output",
    ),
]

NoReportOption = Annotated[
    bool,
    typer.Option(
        "--no-report", help="Do not write the HTML report.", rich_help_panel="Diagnostics"
    ),
]

SaeFileOption = Annotated[
    Path | None,
    typer.Option(
        "--sae",
        help="A dictionary actviz sae trained (sae.safetensors, or its folder): its layer "
        "shown as features instead of channels.",
        show_default=False,
    ),
]
