"""Optical flow: a pair of images in, a list of flow fields (one per refinement iteration) out.

torchvision's raft_small and raft_large, and a user's own model that says
``actviz_family = "optical_flow"`` (called as ``model(image1, image2)``). An input is a pair
``(C, 2, H, W)`` (:class:`~actviz.models.clips.PairPreprocessing`): two images, or two
consecutive frames of a video or of a folder of frames.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actviz.contexts import type_names
from actviz.models.clips import PairPreprocessing, pair_preprocessing
from actviz.models.families.base import Family
from actviz.models.families.inputs import PAIRS
from actviz.models.families.video import declared_family

if TYPE_CHECKING:
    from torch import nn

    from actviz.models.preprocessing import Preprocessing

__all__ = ["OPTICAL_FLOW", "flow_updates", "flow_updates_kept", "is_optical_flow_model"]

#: The attribute :func:`flow_updates` sets on a model for the calls of one command.
_UPDATES = "_actviz_flow_updates"


def is_optical_flow_model(module: nn.Module) -> bool:
    """torchvision's RAFT (and models built on it), or a model that says it is one."""

    declared = declared_family(module)
    if declared is not None:
        return declared == "optical_flow"
    return "RAFT" in type_names(module)


def flow_updates(module: nn.Module, updates: int | None) -> None:
    """Run RAFT with ``updates`` refinement iterations (None: the model's own 12)."""
    if updates is None:
        if hasattr(module, _UPDATES):
            delattr(module, _UPDATES)
        return
    object.__setattr__(module, _UPDATES, int(updates))


def flow_updates_kept(module: nn.Module) -> Callable[[], None]:
    """A function that puts back the iteration count :func:`flow_updates` set (or its
    absence) as it is now."""
    had = hasattr(module, _UPDATES)
    value = getattr(module, _UPDATES, None)

    def put_back() -> None:
        if had:
            object.__setattr__(module, _UPDATES, value)
        elif hasattr(module, _UPDATES):
            delattr(module, _UPDATES)

    return put_back


def _call(module: Any, x: Any) -> Any:
    """A batch of pairs ``(B, C, 2, H, W)`` as two images; an image batch (``list-layers``'
    zeros) as a pair of the same image."""
    first, second = (x[:, :, 0], x[:, :, 1]) if x.ndim == 5 else (x, x)
    updates = getattr(module, _UPDATES, None)
    if updates is not None:
        return module(first, second, num_flow_updates=updates)
    return module(first, second)


def _preprocessing(preprocess: Preprocessing, module: nn.Module) -> Preprocessing:

    if isinstance(preprocess, PairPreprocessing):
        return preprocess
    return pair_preprocessing(None)


OPTICAL_FLOW = Family(
    key="optical_flow",
    label="optical-flow",
    torchvision="optical_flow",
    claims=is_optical_flow_model,
    call=_call,
    preprocessing=_preprocessing,
    inputs=PAIRS,
    classifies=False,
    gradients=(
        "a flow model has no class scores: its output is a flow field per iteration; leave "
        "the option out"
    ),
    commands={
        "optimize": (
            "a flow model's output is a flow field, not a score to maximize; optimize a "
            "classifier or backbone (resnet50, ...)"
        ),
        "top-images": (
            "a flow model takes pairs of images, not single images to rank; run it on the "
            "pairs instead (actviz run MODEL FRAME1 FRAME2)"
        ),
        "label": (
            "label scores units on single images, and a flow model takes pairs of images; run "
            "it on the pairs instead (actviz run MODEL FRAME1 FRAME2)"
        ),
        "diff": (
            "diff compares models on single images, and a flow model takes pairs; run each "
            "model on the pairs with actviz run"
        ),
        "sae": (
            "sae trains a dictionary on a layer over single images, and a flow model takes "
            "pairs; run it on the pairs instead (actviz run MODEL FRAME1 FRAME2)"
        ),
        "tcav": (
            "tcav tests concepts for a class, and a flow model gives flow fields for pairs; "
            "use a classifier"
        ),
        "cam-eval": (
            "cam-eval scores maps by a class score, and a flow model gives flow fields for "
            "pairs; use a classifier"
        ),
        "atlas": (
            "atlas maps a layer over single images, and a flow model takes pairs; run it on "
            "the pairs instead (actviz run MODEL FRAME1 FRAME2)"
        ),
        "ablate": (
            "ablate measures class accuracy over images, and a flow model gives flow fields "
            "for pairs; use a classifier"
        ),
    },
    outputs="a list of (B, 2, H, W) flow fields, one per refinement iteration",
)
