"""Layer outputs laid out like a convolution's, ``(B, C, H, W)``: ViT tokens and channels-last
(Swin) blocks go through :func:`to_nchw`, so every CAM method reads one layout."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["CamLayout", "to_nchw"]

CamLayout = Literal["nchw", "nhwc", "tokens"]
"""How a layer output is laid out, for :func:`to_nchw` and the CAM methods."""


def to_nchw(
    tensor: torch.Tensor,
    layout: CamLayout = "nchw",
    *,
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
) -> torch.Tensor:
    """Reshape a layer output to ``(B, C, H, W)`` (or one image's to ``(C, H, W)``).

    Args:
        tensor: ``nchw``: ``(B, C, H, W)``; ``nhwc`` (Swin): ``(B, H, W, C)``; ``tokens``
            (ViT): ``(B, prefix + h*w, C)``. The batch dimension may be left out.
        layout: One of ``nchw``, ``nhwc``, ``tokens``.
        grid: For ``tokens``: the patch grid ``(h, w)``; None assumes a square one.
        prefix_tokens: For ``tokens``: how many class/register tokens come first.

    Returns:
        A view or copy laid out channels-first.

    Raises:
        ValueError: For a shape that does not fit the layout.
    """
    unbatched = {"nchw": 3, "nhwc": 3, "tokens": 2}.get(layout)
    if unbatched is None:
        raise ValueError(f"layout must be nchw, nhwc or tokens, got {layout!r}")
    if tensor.ndim == unbatched:
        return to_nchw(tensor.unsqueeze(0), layout, grid=grid, prefix_tokens=prefix_tokens)[0]
    if tensor.ndim != unbatched + 1:
        raise ValueError(f"a {layout} output must have {unbatched + 1} dims, got {tensor.ndim}")
    if layout == "nchw":
        return tensor
    if layout == "nhwc":
        return tensor.permute(0, 3, 1, 2)
    batch, count, channels = tensor.shape
    patches = count - prefix_tokens
    if grid is None:
        side = math.isqrt(max(patches, 0))
        grid = (side, side)
    if patches <= 0 or grid[0] * grid[1] != patches:
        raise ValueError(
            f"{count} tokens minus {prefix_tokens} prefix tokens do not fill a "
            f"{grid[0]}x{grid[1]} grid; pass grid=(h, w) and prefix_tokens"
        )
    return tensor[:, prefix_tokens:].reshape(batch, grid[0], grid[1], channels).permute(0, 3, 1, 2)
