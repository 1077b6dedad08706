"""Run options as frozen dataclasses: built once (by the CLI, or from ``run``'s keywords), checked
when built, and passed typed to every step of the pipeline.

Each group says one thing about a run: how the model is loaded, how grids are drawn, which
gradients are taken, how the work is executed. :class:`RunOptions` holds the groups and the few
options that belong to the run as a whole. Importing this module imports no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from actviz.errors import UsageError

if TYPE_CHECKING:
    from actviz.hooks import CaptureMode
    from actviz.layouts import Layout
    from actviz.models import Preprocessing
    from actviz.stats import Thresholds

__all__ = [
    "DrawOptions",
    "Engine",
    "ExecutionOptions",
    "GradientOptions",
    "LoadOptions",
    "Norm",
    "Order",
    "RunOptions",
    "TensorFormat",
    "from_flat",
]

_Options = TypeVar("_Options")

Engine = Literal["local", "ray"]
Order = Literal["index", "mean", "max", "std"]
Norm = Literal["channel", "layer", "shared"]
TensorFormat = Literal["npy", "safetensors"]


@dataclass(frozen=True)
class LoadOptions:
    """How the model is built and where it runs.

    Attributes:
        weights: ``auto``, ``default``, ``none``, an enum name, or a checkpoint path.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        trust_checkpoint: Allow a checkpoint that needs full unpickling (runs its code).
        input_size: ``(height, width)`` of the model input, for models that do not take
            224 x 224.
        in_chans: 3 (RGB) or 1 (greyscale) input channels.
        preprocess: The input transform (:class:`~actviz.models.Preprocessing`) instead of
            the model's own; the Python API's way to feed a model object as it was trained.
    """

    weights: str = "auto"
    device: str = "auto"
    trust_checkpoint: bool = False
    input_size: tuple[int, int] | None = None
    in_chans: int = 3
    preprocess: Preprocessing | None = None


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
        overlay_channel: The channel to overlay instead of the mean.
        save_tensors: Also save each raw activation as ``npy`` or ``safetensors``.
        png_compression: Deflate level 0-9 of the PNGs (1 is fast and nearly as small).
        grids: Draw the grid PNGs (False: statistics and tensors only, much faster).
    """

    max_channels: int = 64
    order: Order = "index"
    norm: Norm = "channel"
    clip: tuple[float, float] | None = None
    cmap: str | None = None
    layout: Layout = "auto"
    overlay: bool = False
    overlay_channel: int | None = None
    save_tensors: TensorFormat | None = None
    png_compression: int = 1
    grids: bool = True

    def __post_init__(self) -> None:
        if self.clip is not None:
            lo, hi = self.clip
            if not 0 <= lo < hi <= 100:
                raise UsageError(f"--clip needs 0 <= LO < HI <= 100, e.g. 1,99; got {lo},{hi}")
            object.__setattr__(self, "clip", (float(lo), float(hi)))
        if self.cmap is not None:
            from actviz.render import colormap_lut

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
    """

    grads: bool = False
    target: str = "top1"
    cam: bool = False
    cam_classes: int = 1

    def __post_init__(self) -> None:
        if self.cam_classes < 1:
            raise UsageError("--cam-classes must be at least 1")
        if self.cam_classes > 1:
            object.__setattr__(self, "cam", True)

    @property
    def backward(self) -> bool:
        """Whether the run needs a backward pass at all."""
        return self.grads or self.cam


@dataclass(frozen=True)
class ExecutionOptions:
    """How the work is carried out; none of it changes what is drawn.

    Attributes:
        batch_size: Images per forward pass.
        workers: DataLoader worker processes for decoding (0: one background thread).
        amp: Autocast the forward pass (bfloat16 on CPU, float16 on CUDA); the maps are drawn
            in float32.
        channels_last: Run the model in channels-last memory format.
        resume: Skip images whose outputs an earlier run with the same settings completed.
        overwrite: Replace an earlier run's outputs in the output folder.
        engine: ``local`` (this process), or ``ray``: the per-image summaries on a pool of
            Ray actors (``workers`` of them; the ``ray`` extra), for ``stats`` and
            ``top-images``.
        ray_address: The Ray cluster to join (``auto``: the one ``ray start`` runs here);
            None starts a local Ray instance.
    """

    batch_size: int = 8
    workers: int = 0
    amp: bool = False
    channels_last: bool = False
    resume: bool = False
    overwrite: bool = False
    engine: Engine = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.workers < 0:
            raise UsageError("--batch-size must be at least 1 and --workers at least 0")
        if self.resume and self.overwrite:
            raise UsageError("--resume and --overwrite contradict each other; choose one")
        if self.engine not in ("local", "ray"):
            raise UsageError(f"unknown --engine '{self.engine}'; use local or ray")
        if self.ray_address is not None and self.engine != "ray":
            raise UsageError("--ray-address needs --engine ray")

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the manifest."""
        return dataclasses.asdict(self)


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
        thresholds: Anomaly thresholds (``actviz.stats.Thresholds``); None for the defaults.
        top_k: How many predictions to record per image for classifiers.
        load, draw, gradients, execution: The option groups.
    """

    layers: str | None = None
    out: Path = Path("actviz-out")
    capture: CaptureMode = "output"
    stats: bool = True
    report: bool = True
    thresholds: Thresholds | None = None
    top_k: int = 5
    load: LoadOptions = field(default_factory=LoadOptions)
    draw: DrawOptions = field(default_factory=DrawOptions)
    gradients: GradientOptions = field(default_factory=GradientOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    @classmethod
    def from_keywords(cls, **keywords: Any) -> RunOptions:
        """Build the groups from flat keywords, as ``actviz.run(..., norm="layer")`` takes them.

        Raises:
            TypeError: For a keyword no group has, naming the closest one.
        """
        return from_flat(cls, _GROUPS, keywords, caller="run")


def from_flat(
    cls: type[_Options],
    groups: Mapping[str, type[Any]],
    keywords: Mapping[str, Any],
    *,
    caller: str,
) -> _Options:
    """Options of a command from flat keywords: each keyword goes to the group that has a
    field of its name (``groups``: field of ``cls`` -> its dataclass), or to ``cls`` itself.

    Raises:
        TypeError: For a keyword no group has, naming the closest one.
    """
    group_of = {f.name: name for name, kind in groups.items() for f in dataclasses.fields(kind)}
    top_fields = {f.name for f in dataclasses.fields(cls)} - set(groups)  # type: ignore[arg-type]
    values: dict[str, dict[str, Any]] = {name: {} for name in groups}
    top: dict[str, Any] = {}
    for key, value in keywords.items():
        if key == "layers" and value is not None and not isinstance(value, str):
            value = ",".join(value)
        if key == "out":
            value = Path(value)
        if key in group_of:
            values[group_of[key]][key] = value
        elif key in top_fields:
            top[key] = value
        else:
            close = difflib.get_close_matches(key, [*group_of, *top_fields], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument '{key}'{hint}")
    built = {name: groups[name](**group) for name, group in values.items()}
    return cls(**top, **built)


_GROUPS: dict[str, type[Any]] = {
    "load": LoadOptions,
    "draw": DrawOptions,
    "gradients": GradientOptions,
    "execution": ExecutionOptions,
}
