"""The options of ``run``'s pictures, declared once: how layers are read, the grids, the extra
views, saved tensors and gradients; and the groups that build the library's draw and gradient
options from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from actviz.cli.groups import Flags, pair
from actviz.cli.options import MaxChannelsOption, PngCompressionOption
from actviz.errors import UsageError

if TYPE_CHECKING:
    from actviz.run.options import DrawOptions, GradientOptions

__all__ = [
    "CaptureOption",
    "DrawFlags",
    "GradientFlags",
    "NoImagesOption",
    "check_no_images",
]

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
            "principal components, fitted once over every image of the run: "
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
        help="Overlay this channel instead of the mean (implies --overlay).",
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

CamMethodOption = Annotated[
    str | None,
    typer.Option(
        "--cam-method",
        metavar="METHOD",
        help=(
            "Which class activation map --cam draws: gradcam (default), gradcam++, layercam, "
            "scorecam (one forward per channel, batched) or eigencam (first principal "
            "component, class-agnostic). Implies --cam."
        ),
        rich_help_panel="Gradients",
        show_default=False,
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


@dataclass(frozen=True)
class DrawFlags(Flags):
    """How each layer is read and drawn: ``--layout``, the grid, the views and saved tensors."""

    layout: LayoutOption = "auto"
    max_channels: MaxChannelsOption = 64
    sort: SortOption = "index"
    norm: NormOption = "channel"
    clip: ClipOption = None
    cmap: CmapOption = None
    overlay: OverlayOption = False
    overlay_channel: OverlayChannelOption = None
    view: ViewOption = None
    pca_mask: PcaMaskOption = False
    save_tensors: SaveTensorsOption = False
    tensor_format: TensorFormatOption = None
    png_compression: PngCompressionOption = 1

    def pca(self) -> bool:
        """``--view`` values -> whether the PCA view is drawn."""
        views = self.view or []
        chosen = {v.strip().lower() for view in views for v in view.split(",") if v.strip()}
        unknown = chosen - {"pca", "grid"}
        if unknown:
            raise UsageError(
                f"--view takes pca (or grid, always drawn), not '{sorted(unknown)[0]}'"
            )
        return "pca" in chosen

    def options(self, *, grids: bool) -> DrawOptions:
        """The library's draw options; ``grids``: whether grid PNGs are written at all."""
        from actviz.run.options import DrawOptions

        return DrawOptions(
            max_channels=self.max_channels,
            order=self.sort,
            norm=self.norm,
            clip=pair(self.clip, "--clip", float) if self.clip else None,
            cmap=self.cmap,
            layout=self.layout,
            overlay=self.overlay or self.overlay_channel is not None,
            overlay_channel=self.overlay_channel,
            save_tensors=self.tensor_format or ("npy" if self.save_tensors else None),
            png_compression=self.png_compression,
            grids=grids,
            pca=self.pca(),
            pca_mask=self.pca_mask,
        )


@dataclass(frozen=True)
class GradientFlags(Flags):
    """``--grads``, ``--target`` and the class activation maps (``--cam``, its method)."""

    grads: GradsOption = False
    target: TargetOption = "top1"
    cam: CamOption = False
    cam_classes: CamClassesOption = 1
    cam_method: CamMethodOption = None

    def options(self) -> GradientOptions:
        """The library's gradient options (the same fields; ``--cam-method`` implies
        ``--cam``)."""
        from actviz.gradients.registry import DEFAULT_CAM, cam_method
        from actviz.run.options import GradientOptions

        return GradientOptions(
            grads=self.grads,
            target=self.target,
            cam=self.cam or self.cam_method is not None,
            cam_classes=self.cam_classes,
            cam_method=cam_method(self.cam_method) if self.cam_method else DEFAULT_CAM,
        )


def check_no_images(draw: DrawFlags, gradients: GradientFlags) -> None:
    """Refuse ``--no-images`` beside an option whose pictures are drawn with the grids: they
    would be asked for and never written."""
    asked = [
        ("--overlay", draw.overlay),
        ("--overlay-channel", draw.overlay_channel is not None),
        ("--grads", gradients.grads),
        ("--cam", gradients.cam),
        ("--cam-classes", gradients.cam_classes > 1),
        ("--cam-method", gradients.cam_method is not None),
    ]
    named = [flag for flag, given in asked if given]
    if named:
        raise UsageError(
            f"{named[0]} draws pictures beside each grid, and --no-images writes none: drop "
            f"--no-images (or {named[0]})"
        )
