"""Video classification: a clip ``(B, C, T, H, W)`` in, ``(B, classes)`` Kinetics scores out.

torchvision's r3d_18, mc3_18, r2plus1d_18, s3d, mvit_v1_b, mvit_v2_s and swin3d_t/s/b, and a
user's own model whose first convolution is 3-D (or that says ``actviz_family = "video"``).
Inputs are video files, animations or folders of frames, sampled into clips as the weights'
transforms say (:class:`~actviz.models.clips.ClipPreprocessing`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from actviz.models.clips import ClipPreprocessing, clip_preprocessing
from actviz.models.families.base import Family
from actviz.models.families.inputs import CLIPS

if TYPE_CHECKING:
    from torch import nn

    from actviz.models.preprocessing import Preprocessing

__all__ = ["VIDEO", "clip_length_refusal", "declared_family", "is_video_model"]

#: Frames of the still clip an image batch becomes for tracing (MViT needs 16).
_TRACE_FRAMES = 16
#: The attribute a user's own model may carry to say which family it is.
FAMILY_ATTRIBUTE = "actviz_family"


def declared_family(module: nn.Module) -> str | None:
    """The family a model says it is (``model.actviz_family = "video"``), if it says."""
    value = getattr(module, FAMILY_ATTRIBUTE, None)
    return value.replace("-", "_") if isinstance(value, str) else None


def is_video_model(module: nn.Module) -> bool:
    """A model that says it is a video model, or whose first convolution is 3-D (torchvision's
    video models all start with a ``Conv3d``)."""
    declared = declared_family(module)
    if declared is not None:
        return declared == "video"
    for sub in module.modules():
        kind = type(sub).__name__
        if kind.startswith(("Conv", "LazyConv")) and kind[-2:] in ("1d", "2d", "3d"):
            return kind.endswith("3d")
    return False


def _call(module: Any, x: Any) -> Any:
    """A clip batch ``(B, C, T, H, W)`` as it is; an image batch (``list-layers``' zeros) as
    a still clip."""
    if x.ndim == 4:
        x = x.unsqueeze(2).expand(-1, -1, _TRACE_FRAMES, -1, -1)
    return module(x)


def _preprocessing(preprocess: Preprocessing, module: nn.Module) -> Preprocessing:
    """The weights' clip preprocessing, or (a user's own model) its image preprocessing made
    one: 16 frames at 15 fps."""

    if isinstance(preprocess, ClipPreprocessing):
        return preprocess
    return clip_preprocessing(None, base=preprocess, input_size=preprocess.crop_size)


def _takes(module: nn.Module, shape: tuple[int, ...]) -> bool:
    """Whether ``module`` runs on a clip of ``shape``: a forward on the meta device with its
    parameters and buffers as meta tensors (shapes only, no data copied, milliseconds)."""

    import torch
    from torch.func import functional_call

    meta = torch.device("meta")
    state = {
        name: torch.empty_like(tensor, device=meta)
        for name, tensor in itertools.chain(module.named_parameters(), module.named_buffers())
    }
    try:
        with torch.no_grad():
            functional_call(module, state, (torch.zeros(shape, device=meta),))
    except Exception:  # a shape the model refuses, or an op without a meta kernel
        return False
    return True


def clip_length_refusal(
    name: str, module: nn.Module, frames: int, recipe: int, clip: tuple[int, int, int]
) -> str | None:
    """Why a video model cannot take clips of ``frames`` frames, naming the lengths it takes,
    or None when it takes them (or when even its recipe's length cannot be checked: the run
    then says what failed). MViT's positional encoding is fixed (16 frames, 15 rounding up),
    S3D's pooling needs at least 13, r3d_18 takes any length.

    Args:
        name: The model's name, for the message.
        module: The model.
        frames: The clip length asked for (``--frames``).
        recipe: The clip length of its weights' recipe (its default).
        clip: ``(channels, height, width)`` of each frame as the model takes it.
    """
    channels, height, width = clip

    def takes(length: int) -> bool:
        return _takes(module, (1, channels, length, height, width))

    if frames == recipe or takes(frames) or not takes(recipe):
        return None
    low = recipe
    while low > 1 and takes(low - 1):
        low -= 1
    if takes(recipe + 1):
        span = f"at least {low} frames"
    else:
        span = f"{low} to {recipe} frames" if low < recipe else f"{recipe} frames"
    short = "too short" if frames < low else "too long"
    return (
        f"{name} takes clips of {span}; --frames {frames} is {short}: pass --frames {recipe} "
        "(its default) or leave it out"
    )


VIDEO = Family(
    key="video",
    label="video",
    torchvision="video",
    claims=is_video_model,
    call=_call,
    preprocessing=_preprocessing,
    inputs=CLIPS,
    commands={
        "optimize": "a video model's input is a clip; actviz optimizes images: use an image model",
        "top-images": "top-images ranks images; a video model takes clips: use actviz run on them",
        "label": "label scores units on images; a video model takes clips: use actviz run on them",
        "ablate": (
            "ablate measures classes over a folder of images; a video model takes clips: "
            "use an image classifier"
        ),
        "diff": (
            "diff compares layers on images; a video model takes clips: run each model on "
            "them with actviz run"
        ),
        "sae": (
            "sae trains a dictionary on an image layer's positions; a video model takes clips: "
            "use actviz run on them"
        ),
        "tcav": (
            "tcav learns concepts from folders of images; a video model takes clips: use an "
            "image classifier"
        ),
        "cam-eval": (
            "cam-eval deletes and inserts an image's pixels; a video model takes clips: draw "
            "their maps with actviz run --cam"
        ),
        "atlas": (
            "atlas maps a layer over a folder of images; a video model takes clips: use "
            "actviz run on them"
        ),
    },
    outputs="(B, classes) Kinetics scores of a clip",
)
