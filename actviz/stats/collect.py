"""Statistics of captured batches, computed in the hooks or the render threads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["stats_callback"]


def stats_callback(contexts: Mapping[str, Any]) -> Callable[[str, Any], Any]:
    """Statistics per image of a captured batch, computed where the tensor is."""
    from actviz.stats.compute import compute_stats, default_channel_dim

    def summarize(module: str, tensor: Any) -> Any:
        ctx = contexts.get(module)
        channels_last = tensor.ndim == 4 and ctx is not None and ctx.channels_last
        dim = -1 if channels_last else default_channel_dim(tensor.shape)
        try:
            return compute_stats(tensor, channel_dim=dim)
        except ValueError:  # complex or 0-d outputs: nothing to summarize
            return None

    return summarize
