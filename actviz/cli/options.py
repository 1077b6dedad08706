"""Command-line options shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

__all__ = [
    "CaptureOption",
    "LayoutOption",
    "MaxChannelsOption",
    "SortOption",
    "NormOption",
    "ClipOption",
    "CmapOption",
    "OverlayOption",
    "PcaMaskOption",
    "ViewOption",
    "OverlayChannelOption",
    "SaveTensorsOption",
    "TensorFormatOption",
    "PngCompressionOption",
    "GradsOption",
    "TargetOption",
    "CamOption",
    "CamClassesOption",
    "NoImagesOption",
    "NoReportOption",
    "AmpOption",
    "BatchSizeOption",
    "ChannelsLastOption",
    "DeviceOption",
    "EngineOption",
    "FailOnOption",
    "InChansOption",
    "InputSizeOption",
    "InputsArg",
    "JsonOption",
    "LayersOption",
    "ModelArg",
    "OutOption",
    "OverwriteOption",
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
        help="A torchvision model name (resnet34), or your own: package.module:factory or "
        "path/to/file.py:factory (runs that code)."
    ),
]

InputsArg = Annotated[
    list[Path], typer.Argument(help="Image files and/or folders.", show_default=False)
]

OutOption = Annotated[
    Path, typer.Option("--out", "-o", help="Output folder.", rich_help_panel="Output")
]

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

# Options of `run` only.
CaptureOption = Annotated[
    Literal["output", "input", "both", "attn"],
    typer.Option(
        "--capture",
        help=(
            "Draw each layer's output, its input (forward pre-hook), both, or attn: each "
            "head's attention from the class token to the patches, for layers that are or "
            "hold an nn.MultiheadAttention (ViT encoder blocks)."
        ),
        rich_help_panel="Layers",
    ),
]

LayoutOption = Annotated[
    Literal["auto", "nchw", "nhwc", "tokens"],
    typer.Option(
        "--layout",
        help="How outputs are read: auto, or force nchw, nhwc (channels-last) or tokens.",
        rich_help_panel="Layers",
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

SortOption = Annotated[
    Literal["index", "mean", "max", "std"],
    typer.Option(
        "--sort",
        help="Which channels when capped: index order, or the top ones by mean, max or std.",
        rich_help_panel="Grid",
    ),
]

NormOption = Annotated[
    Literal["channel", "layer", "shared"],
    typer.Option(
        "--norm",
        help=(
            "Scale per channel, per layer, or shared: one scale per layer across every "
            "image of the run, so images compare (costs a second pass)."
        ),
        rich_help_panel="Grid",
    ),
]

ClipOption = Annotated[
    str | None,
    typer.Option(
        "--clip",
        metavar="LO,HI",
        help="Clip to these percentiles before scaling, e.g. 1,99.",
        rich_help_panel="Grid",
    ),
]

CmapOption = Annotated[
    str | None,
    typer.Option(
        "--cmap",
        help="Any matplotlib colormap (default: viridis, or RdBu_r centred on 0 if signed).",
        rich_help_panel="Grid",
    ),
]

ViewOption = Annotated[
    list[str] | None,
    typer.Option(
        "--view",
        metavar="pca",
        help=(
            "Also draw this view of each layer: pca colours each position by the first three "
            "principal components, fitted once over every image (a first pass): "
            "<NN>_<layer>_pca.png. Repeatable."
        ),
        rich_help_panel="Grid",
    ),
]

PcaMaskOption = Annotated[
    bool,
    typer.Option(
        "--pca-mask",
        help="With --view pca: black out the background, where the first component is negative.",
        rich_help_panel="Grid",
    ),
]

OverlayOption = Annotated[
    bool,
    typer.Option(
        "--overlay",
        help="Also write each layer's mean map over the input: <NN>_<layer>_overlay.png.",
        rich_help_panel="Grid",
    ),
]

OverlayChannelOption = Annotated[
    int | None,
    typer.Option(
        "--overlay-channel",
        min=0,
        help="Overlay this channel instead of the mean.",
        rich_help_panel="Grid",
    ),
]

SaveTensorsOption = Annotated[
    bool,
    typer.Option(
        "--save-tensors",
        help="Also save each raw activation beside its PNG (.npy unless --tensor-format).",
        rich_help_panel="Output",
    ),
]

TensorFormatOption = Annotated[
    Literal["npy", "safetensors"] | None,
    typer.Option(
        "--tensor-format",
        help="File format of the saved activations: npy or safetensors (implies --save-tensors).",
        rich_help_panel="Output",
        show_default=False,
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

GradsOption = Annotated[
    bool,
    typer.Option(
        "--grads",
        help=(
            "Also backpropagate from --target: a gradient grid per layer "
            "(<NN>_<layer>_grad.png) and gradient-flow charts."
        ),
        rich_help_panel="Gradients",
    ),
]

TargetOption = Annotated[
    str,
    typer.Option(
        "--target",
        help="What to backpropagate from: top1 (each image its own), a class index or name.",
        rich_help_panel="Gradients",
    ),
]

CamOption = Annotated[
    bool,
    typer.Option(
        "--cam",
        help=(
            "Grad-CAM over the input for the selected layers (default: the last spatial "
            "layer): <NN>_<layer>_cam.png."
        ),
        rich_help_panel="Gradients",
    ),
]

CamClassesOption = Annotated[
    int,
    typer.Option(
        "--cam-classes",
        min=1,
        help="Grad-CAMs of the top K classes side by side (implies --cam).",
        rich_help_panel="Gradients",
    ),
]

NoImagesOption = Annotated[
    bool,
    typer.Option(
        "--no-images",
        help="Statistics only: no grid PNGs (same as `actviz stats`).",
        rich_help_panel="Diagnostics",
    ),
]

NoReportOption = Annotated[
    bool,
    typer.Option(
        "--no-report", help="Do not write the HTML report.", rich_help_panel="Diagnostics"
    ),
]

# Options of `diff` only.
AgainstOption = Annotated[
    Path | None,
    typer.Option(
        "--against",
        metavar="CHECKPOINT",
        help="Model B: MODEL (or --against-model) with this checkpoint file.",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

AgainstModelOption = Annotated[
    str | None,
    typer.Option(
        "--against-model",
        metavar="NAME_OR_FACTORY",
        help="Model B: another model with the same layer names (a torchvision name or "
        "file.py:factory, which runs that code).",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

AgainstWeightsOption = Annotated[
    str | None,
    typer.Option(
        "--against-weights",
        metavar="W",
        help="Weights of model B, as --weights takes them (default: the same as --weights).",
        rich_help_panel="Comparison",
        show_default=False,
    ),
]

DiffMetricOption = Annotated[
    Literal["cosine", "cka"],
    typer.Option(
        "--metric",
        help="Which similarity --threshold applies to: cosine (per image) or cka (over the "
        "images).",
        rich_help_panel="Comparison",
    ),
]

DiffThresholdOption = Annotated[
    float,
    typer.Option(
        "--threshold",
        help="The first layer whose --metric is below this is the first divergent layer.",
        rich_help_panel="Comparison",
    ),
]

DiffImagesOption = Annotated[
    int,
    typer.Option(
        "--images",
        min=0,
        help="Difference pictures for the first N images only (0: none), so large folders "
        "stay fast.",
        rich_help_panel="Output",
    ),
]
