"""One image of a batch, as the render threads draw it: its captures, what the model saw, and
what every picture of it says in its header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from PIL import Image
from PIL import Image as PILImage

from actviz.command.session import RANDOM_NOTE
from actviz.render.overlay import MIN_VIEW, input_view
from actviz.render.overlay import headed as under_header
from actviz.results import Prediction
from actviz.run.options import DrawOptions

if TYPE_CHECKING:
    import numpy as np
    import torch
    from PIL import Image

    from actviz.hooks import Capture
    from actviz.layouts import LayerContext
    from actviz.render.pca import PcaFit

__all__ = [
    "RANDOM_NOTE",
    "ImageJob",
    "display_view",
    "headed",
    "header_notes",
    "model_view",
    "finite_scores",
    "top_k_predictions",
]


@dataclass(frozen=True)
class ImageJob:
    """Everything needed to draw the layers of one image of a batch."""

    captures: Sequence[Capture]
    summaries: Sequence[Sequence[tuple[float, float, float]]]
    index: int
    folder: PurePosixPath
    out_dir: Path
    options: DrawOptions
    contexts: Mapping[str, LayerContext] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    model_input: torch.Tensor | None = None
    mean: Sequence[float] = ()
    std: Sequence[float] = ()
    thumbnail: bool = False
    gradients: Mapping[str, Any] = field(default_factory=dict)
    gradient_grids: bool = False
    stats_fn: Callable[[str, Any], Any] | None = None
    target: int | None = None
    cam_keys: frozenset[str] = frozenset()
    class_cams: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    shared_channels: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """With ``--norm shared`` and a sort: per capture key, the channels every image shows."""
    shared_images: int = 0
    """How many images ``shared_channels`` were ranked over."""
    target_label: str | None = None
    """The name of class ``target``, when the model has names."""
    random_weights: bool = False
    """The model's weights are random: every picture's header says so."""
    channel_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Module name -> the name of each output channel (a segmentation head's classes)."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """What the model's family adds for this image, for its per-image pictures
    (:data:`actviz.run.families.IMAGE_KINDS`): ``segmentation`` (the module whose output is a
    segmentation model's class logits), ``optical_flow`` (a flow model's estimate at each
    iteration, ``(N, 2, H, W)``), ``detections`` and ``detection_cams`` (a detector's)."""
    pca: Mapping[str, PcaFit] = field(default_factory=dict)
    """With ``--view pca``: capture key -> the components fitted over the run."""
    features: Mapping[str, Any] = field(default_factory=dict)
    """With ``--sae``: capture key -> the sparse dictionary whose feature maps are drawn."""


def model_view(job: ImageJob) -> Image.Image:
    """What the model saw (after resize and crop), de-normalized; greyscale input as grey.
    A family that resizes inside the model (a detector's transform) gives the size it saw
    the image at as the extra ``view_size`` ``(width, height)``: the view is shrunk to it."""

    assert job.model_input is not None
    x = job.model_input.numpy()
    if x.ndim == 4:  # a clip (C, T, H, W): its middle frame; a flow pair: its first picture
        x = x[:, (x.shape[1] - 1) // 2]
    mean, std = list(job.mean), list(job.std)
    if x.shape[0] == 1:  # a greyscale model: show its one channel as grey
        x = x.repeat(3, axis=0)
        mean, std = mean * 3, std * 3
    view = input_view(x, mean, std)
    size = job.extras.get("view_size")
    if size is not None and tuple(size) != view.size:
        view = view.resize(tuple(size), PILImage.Resampling.BILINEAR, reducing_gap=2.0)
    return view


def header_notes(job: ImageJob, *lines: str | None) -> list[str]:
    """Header lines under the description: these (when set), then random weights (every
    picture of a run with random weights says so)."""
    notes = [line for line in lines if line]
    if job.random_weights:
        notes.append(RANDOM_NOTE)
    return notes


def display_view(job: ImageJob) -> Image.Image:
    """What the model saw, enlarged by a whole factor (nearest) when it is small."""

    view = model_view(job)
    factor = -(-MIN_VIEW // max(view.size))
    if factor > 1:
        view = view.resize((view.width * factor, view.height * factor), Image.Resampling.NEAREST)
    return view


def headed(pixels: np.ndarray, header: Any, cmap: str) -> Image.Image:
    """An RGB picture under a header whose colour bar shows ``cmap``."""

    return under_header(pixels, header, cmap)


def finite_scores(logits: object, row: int) -> bool:
    """Whether row ``row`` of a classifier's ``logits`` is all finite (an output that is not
    one row of scores per image counts as finite: it has no predictions to spoil)."""
    import torch

    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        return True
    return bool(torch.isfinite(logits[row]).all())


def top_k_predictions(
    logits: object, row: int, categories: list[str] | None, k: int
) -> list[Prediction]:
    """The ``k`` most probable classes of row ``row`` of a classifier's ``logits`` (none for
    an output that is not one row of class scores per image)."""
    import torch

    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or k <= 0:
        return []
    probs = logits[row].float().softmax(dim=0)
    values, indices = probs.topk(min(k, probs.numel()))
    return [
        Prediction(
            index=int(i),
            label=categories[int(i)] if categories and int(i) < len(categories) else None,
            probability=float(v),
        )
        for v, i in zip(values, indices, strict=True)
    ]
