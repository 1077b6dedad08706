"""Video classification: a clip ``(B, C, T, H, W)`` in, ``(B, classes)`` Kinetics scores out.

Listed and traced by ``list-layers``; ``run`` does not take it yet (no clip decoding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.models.families.base import Family

if TYPE_CHECKING:
    from torch import nn

__all__ = ["VIDEO"]

#: Frames of the still clip an image batch becomes for tracing (MViT needs 16).
_TRACE_FRAMES = 16


def _is_video(module: nn.Module) -> bool:
    """torchvision's architectures of the family (and models built on them)."""
    from actviz.contexts import type_names

    return bool(type_names(module) & {"VideoResNet", "S3D", "MViT", "SwinTransformer3d"})


def _call(module: Any, x: Any) -> Any:
    """A clip batch ``(B, C, T, H, W)`` as it is; an image batch (``list-layers``' zeros) as
    a still clip."""
    if x.ndim == 4:
        x = x.unsqueeze(2).expand(-1, -1, _TRACE_FRAMES, -1, -1)
    return module(x)


VIDEO = Family(
    key="video",
    label="video",
    torchvision="video",
    claims=_is_video,
    call=_call,
    refused=(
        "actviz does not run video models yet: they take clips, not images "
        "(`actviz list-layers MODEL` lists their layers)"
    ),
    outputs="(B, classes) Kinetics scores of a clip",
)
