"""Statistics of captured batches, computed in the hooks or the render threads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from actviz.statistics.compute import compute_stats, default_channel_dim

__all__ = ["stats_callback"]


def stats_callback(contexts: Mapping[str, Any]) -> Callable[[str, Any], Any]:
    """Statistics per image of a captured batch, computed where the tensor is."""

    def summarize(module: str, tensor: Any) -> Any:
        ctx = contexts.get(module)
        channels_last = tensor.ndim in (4, 5) and ctx is not None and bool(ctx.channels_last)
        hint = getattr(ctx, "channels_hint", None)
        if tensor.ndim == 5 and hint is not None:  # a clip: (B, T, H, W, C) as Swin3D's
            channels_last = tensor.shape[-1] == hint != tensor.shape[1]
        dim = -1 if channels_last else default_channel_dim(tensor.shape)
        try:
            return compute_stats(tensor, channel_dim=dim)
        except ValueError:  # complex or 0-d outputs: nothing to summarize
            return None

    return summarize
