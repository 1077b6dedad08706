"""The options of ``actviz run`` and ``actviz stats`` as frozen dataclasses: built once (by the
CLI, or from ``run``'s keywords), checked when built, and passed typed to every step.

Each group says one thing about a run: how grids are drawn, which gradients are taken; the
groups every command shares (how the model is loaded, how the work is executed) are in
:mod:`actviz.command.options`. :class:`RunOptions` holds the groups and the few options that belong
to the run as a whole. Importing this module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.command.options import COMMON_GROUPS, ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError
from actviz.gradients.registry import DEFAULT_CAM, map_method
from actviz.hooks.recorders import CaptureMode
from actviz.layouts import Layout
from actviz.render import colormap_lut
from actviz.render.grid import Order

if TYPE_CHECKING:
    from actviz.hooks.recorders import CaptureMode
    from actviz.layouts import Layout
    from actviz.statistics import Thresholds

__all__ = [
    "DrawOptions",
    "GradientOptions",
    "RunNorm",
    "RunOptions",
    "TensorFormat",
]

RunNorm = Literal["channel", "layer", "shared"]
"""A run's scale of the grids: render's per-picture norms, or one scale across the run."""
TensorFormat = Literal["npy", "safetensors"]


@dataclass(frozen=True)
class DrawOptions:
    """How grids are drawn; the same for every image of a run.

    Attributes:
        max_channels: Channels per grid at most (0 = all).
        order: Which channels when capped, in which order: ``index``, or by descending
            ``mean``, ``max`` or ``std``.
        norm: ``channel`` (each tile its own range), ``layer`` (one range per layer and
            image), or ``shared`` (one range per layer across every image of the run: a first
            pass measures it).
        clip: Percentiles ``(lo, hi)`` to clip to before scaling, e.g. ``(1, 99)``.
        cmap: A matplotlib colormap; None picks ``viridis``, or ``RdBu_r`` centred on 0 for
            signed activations.
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        overlay: Also blend each layer's mean map (or ``overlay_channel``) over the input.
        overlay_channel: The channel to overlay instead of the mean (implies ``overlay``).
        save_tensors: Also save each raw activation as ``npy`` or ``safetensors``.
        png_compression: Deflate level 0-9 of the PNGs (1 is fast and nearly as small).
        grids: Draw the grid PNGs (False: statistics and tensors only, much faster).
        pca: Also colour each layer's positions by their first three principal components,
            fitted once over every image (drawn after the pass, from the captures it kept):
            ``<NN>_<layer>_pca.png``.
        pca_mask: Black out the positions where the first component is negative.
    """

    max_channels: int = 64
    order: Order = "index"
    norm: RunNorm = "channel"
    clip: tuple[float, float] | None = None
    cmap: str | None = None
    layout: Layout = "auto"
    overlay: bool = False
    overlay_channel: int | None = None
    save_tensors: TensorFormat | None = None
    png_compression: int = 1
    grids: bool = True
    pca: bool = False
    pca_mask: bool = False

    def __post_init__(self) -> None:

        check_choices(self, {"Layout": Layout})
        if self.max_channels < 0:
            raise UsageError(
                f"--channels must be 0 (every channel) or a number of channels per grid, not "
                f"{self.max_channels}"
            )
        if self.overlay_channel is not None:
            if self.overlay_channel < 0:
                raise UsageError(
                    f"--overlay-channel must be a channel index (0 or more), not "
                    f"{self.overlay_channel}"
                )
            object.__setattr__(self, "overlay", True)
        if self.pca_mask and not self.pca:
            raise UsageError("--pca-mask needs --view pca")
        if self.clip is not None:
            lo, hi = self.clip
            if not 0 <= lo < hi <= 100:
                raise UsageError(f"--clip needs 0 <= LO < HI <= 100, e.g. 1,99; got {lo},{hi}")
            object.__setattr__(self, "clip", (float(lo), float(hi)))
        if self.cmap is not None:
            try:
                colormap_lut(self.cmap)
            except ValueError as exc:
                raise UsageError(f"--cmap: {exc}") from None

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the manifest."""
        return {
            "max_channels": self.max_channels,
            "order": self.order,
            "norm": self.norm,
            "clip": list(self.clip) if self.clip else None,
            "cmap": self.cmap or "auto",
            "layout": self.layout,
            "overlay": self.overlay,
            "overlay_channel": self.overlay_channel,
            "save_tensors": self.save_tensors,
            "grids": self.grids,
            "pca": self.pca,
            "pca_mask": self.pca_mask,
        }


@dataclass(frozen=True)
class GradientOptions:
    """Which gradients a run takes: none by default.

    Attributes:
        grads: Backpropagate from ``target`` and draw each layer's gradient
            (``<NN>_<layer>_grad.png``), with a gradient-flow chart per image and for the run.
        target: What to backpropagate from: ``top1`` (each image its own top class), a class
            index, or a class name.
        cam: Grad-CAM over the input for the selected layers (without a selector: the last
            spatial layer), ``<NN>_<layer>_cam.png``.
        cam_classes: Grad-CAMs of this many top classes side by side (more than 1 implies
            ``cam``).
        cam_method: Which class activation map ``cam`` draws: ``gradcam``, ``gradcam++``,
            ``layercam``, ``scorecam`` or ``eigencam`` (the CAM rows of
            :data:`actviz.gradients.registry.MAP_METHODS`).
    """

    grads: bool = False
    target: str = "top1"
    cam: bool = False
    cam_classes: int = 1
    cam_method: str = DEFAULT_CAM

    def __post_init__(self) -> None:

        check_choices(self)
        method = map_method(self.cam_method, "cam_method", kind="cam")
        object.__setattr__(self, "cam_method", method.name)
        if self.cam_classes < 1:
            raise UsageError("--cam-classes must be at least 1")
        if self.cam_classes > 1 and not method.class_specific:
            raise UsageError(
                "--cam-method eigencam draws one class-agnostic map per image (the first "
                "principal component of the layer's activations): --cam-classes would repeat "
                "it; drop --cam-classes, or choose a class-specific method such as gradcam"
            )
        if self.cam_classes > 1:
            object.__setattr__(self, "cam", True)

    @property
    def backward(self) -> bool:
        """Whether the run needs a backward pass at all."""
        return self.grads or self.cam


@dataclass(frozen=True)
class RunOptions:
    """Everything ``actviz run`` and ``actviz stats`` take besides the model and the inputs.

    Attributes:
        layers: Selector for the layers to draw (see ``actviz.selectors``); None picks a
            sensible default for the architecture (convolutions, ViT blocks, Swin stages).
        out: Output folder; gets ``<image>/<NN>_<layer>.png`` and ``manifest.json``.
        capture: Draw each layer's ``output``, its ``input``, or ``both``.
        stats: Compute per-layer statistics and anomaly flags (``stats.json``,
            ``stats.csv``), on the device where the activation is.
        report: Write the static HTML report ``index.html``.
        thresholds: Anomaly thresholds (``actviz.statistics.Thresholds``); None for the defaults.
        top_k: How many predictions to record per image for classifiers.
        sae: A dictionary ``actviz sae`` trained (``sae.safetensors`` or its folder): its
            layer is drawn as feature maps instead of channels.
        frames: Frames of a video model's clips (None: as the weights' recipe says).
        flow_updates: Refinement iterations of an optical-flow model (None: its own, 12).
        score_threshold: A detector's detections are recorded and drawn from this score up
            (the detector's own cut is lowered to it when it is higher).
        detection: With ``cam``, which of a detector's detections (1: the highest score)
            Grad-CAM explains.
        load, draw, gradients, execution: The option groups.
    """

    layers: str | None = None
    out: Path = Path("actviz-out")
    capture: CaptureMode = "output"
    stats: bool = True
    report: bool = True
    thresholds: Thresholds | None = None
    top_k: int = 5
    sae: Path | None = None
    frames: int | None = None
    flow_updates: int | None = None
    score_threshold: float = 0.5
    detection: int = 1
    load: LoadOptions = field(default_factory=LoadOptions)
    draw: DrawOptions = field(default_factory=DrawOptions)
    gradients: GradientOptions = field(default_factory=GradientOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:

        check_choices(self, {"CaptureMode": CaptureMode})
        if self.sae is not None:
            if self.draw.pca or self.draw.norm == "shared" or self.capture != "output":
                raise UsageError(
                    "--sae draws the layer's features with each image's own scale: drop "
                    "--view pca, --norm shared and --capture input/both/attn"
                )
            if self.execution.engine != "local":
                raise UsageError("--sae draws in this process: drop --engine ray")
        if self.detection < 1:
            raise UsageError(f"--detection counts from 1 (the highest score), not {self.detection}")
        if not 0.0 <= self.score_threshold <= 1.0:
            raise UsageError(f"--score-threshold must be within 0 to 1, not {self.score_threshold}")


GROUPS: dict[str, type[Any]] = {**COMMON_GROUPS, "draw": DrawOptions, "gradients": GradientOptions}
"""The groups of ``run``'s flat keywords (:func:`~actviz.command.options.from_flat`)."""
ALIASES: dict[str, str] = {"sort": "order", "channels": "max_channels"}
"""``run``'s keywords by the command line's names for them (``--sort``, ``--channels``)."""
