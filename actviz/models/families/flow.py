"""Optical flow: a pair of images in, a list of flow fields (one per iteration) out.

Listed and traced by ``list-layers``; ``run`` does not take it yet (no image pairs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.models.families.base import Family

if TYPE_CHECKING:
    from torch import nn

__all__ = ["OPTICAL_FLOW"]


def _is_flow(module: nn.Module) -> bool:
    """torchvision's architectures of the family (and models built on them)."""
    from actviz.contexts import type_names

    return bool(type_names(module) & {"RAFT"})


def _call(module: Any, x: Any) -> Any:
    """A batch of pairs ``(B, 2, C, H, W)`` as two images; an image batch (``list-layers``'
    zeros) as a pair of the same image."""
    if x.ndim == 5:
        return module(x[:, 0], x[:, 1])
    return module(x, x)


OPTICAL_FLOW = Family(
    key="optical_flow",
    label="optical-flow",
    torchvision="optical_flow",
    claims=_is_flow,
    call=_call,
    refused=(
        "actviz does not run optical-flow models yet: they take pairs of images "
        "(`actviz list-layers MODEL` lists their layers)"
    ),
    classifies=False,
    outputs="a list of (B, 2, H, W) flow fields, one per refinement iteration",
)
