"""The library face of ``actviz run``, ``list-layers`` and of drawing one activation.

Each command lives in its family (``actviz.run``, ``actviz.examples``, ``actviz.diff``); this
module gathers the names the package re-exports and :func:`render_activation`, which draws one
activation without a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.models import LayerListing, list_layers
from actviz.results import ImageResult
from actviz.run.command import run
from actviz.run.result import RunResult

if TYPE_CHECKING:
    import numpy as np
    import torch

    from actviz.layouts import LayerContext, Layout
    from actviz.render import GridImage

__all__ = [
    "ImageResult",
    "LayerListing",
    "RunResult",
    "list_layers",
    "render_activation",
    "run",
]


def render_activation(
    activation: torch.Tensor | np.ndarray,
    *,
    title: str = "",
    max_channels: int = 64,
    context: LayerContext | None = None,
    layout: Layout = "auto",
    **render_options: Any,
) -> GridImage:
    """Draw one activation of one image as a grid (or a strip, for a vector).

    Args:
        activation: One image's output: ``(C, H, W)`` maps, ``(H, W, C)`` channels-last,
            ``(1 + H*W, C)`` tokens, or ``(C,)``. A leading batch dimension of 1 is dropped.
        title: The header's first line.
        max_channels: Channels drawn at most (0 = all).
        context: What the model says about the layer (``actviz.layouts.layer_contexts``).
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        **render_options: Passed to ``actviz.render.grid.render_grid`` (``order``, ``norm``,
            ``value_range``, ``clip``, ``cmap``).

    Returns:
        The picture; ``.to_pil()`` gives a Pillow image, ``.to_rgb()`` an array.

    Raises:
        ValueError: When the activation cannot be drawn; the message says why.
    """
    import numpy as np

    from actviz.layouts import to_drawable
    from actviz.render import grid as render

    array = np.asarray(
        activation.detach().cpu().float().numpy() if hasattr(activation, "detach") else activation,
        dtype=np.float32,
    )
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    drawable = to_drawable(array, context, layout=layout)
    if drawable.kind == "none" or drawable.array is None:
        raise ValueError(drawable.note or f"cannot draw an output of shape {array.shape}")
    if drawable.kind == "vector":
        return render.render_vector(drawable.array, title=title, cmap=render_options.get("cmap"))
    return render.render_grid(
        drawable.array, title=title, max_channels=max_channels, **render_options
    )
