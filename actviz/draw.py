"""Drawing one image's captured layers: statistics for the manifest, a grid PNG per layer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.results import LayerResult

if TYPE_CHECKING:
    import numpy as np
    import torch

    from actviz.render import GridImage

__all__ = ["draw_image", "render_activation", "summaries"]


def render_activation(
    activation: torch.Tensor | np.ndarray,
    *,
    title: str = "",
    max_channels: int = 64,
) -> GridImage:
    """Draw one activation of one image as a grid.

    Args:
        activation: ``(C, H, W)`` feature maps, ``(C,)`` a vector, or ``(N, C)`` drawn as one
            map. A leading batch dimension of 1 is dropped.
        title: The header's first line.
        max_channels: Channels drawn at most (0 = all).

    Returns:
        The picture; ``.to_pil()`` gives a Pillow image, ``.to_rgb()`` an array.

    Raises:
        ValueError: For tensors of other shapes.
    """
    import numpy as np

    from actviz import render

    array = np.asarray(
        activation.detach().cpu().float().numpy() if hasattr(activation, "detach") else activation,
        dtype=np.float32,
    )
    if array.ndim in (2, 4) and array.shape[0] == 1:
        array = array[0]
    if array.ndim == 1:
        return render.render_vector(array, title=title)
    if array.ndim == 2:
        return render.render_grid(array[None], title=title, max_channels=1)
    if array.ndim == 3:
        return render.render_grid(array, title=title, max_channels=max_channels)
    raise ValueError(f"cannot draw an activation of shape {tuple(array.shape)}")


def draw_image(
    captures: Sequence[Any],
    summaries: Sequence[Sequence[tuple[float, float, float]]],
    index: int,
    folder: PurePosixPath,
    out_dir: Path,
    max_channels: int,
    level: int,
) -> list[LayerResult]:
    """Draw and write every capture of one image of a batch, one PNG each."""
    from actviz import output

    width = max(2, len(str(len(captures) - 1)))
    drawn: list[LayerResult] = []
    for order, cap in enumerate(captures):
        sample = cap.tensor[index]
        shape = (1, *sample.shape)
        lo, hi, mean = summaries[order][index]
        title = f"{cap.key}   {cap.module_type}   {shape}"
        common = (cap.key, cap.module, cap.module_type, cap.call, shape, lo, hi, mean)
        try:
            grid = render_activation(sample, title=title, max_channels=max_channels)
        except ValueError as exc:
            drawn.append(LayerResult(*common, 0, 0, None, note=str(exc)))
            continue
        rel = folder / output.layer_filename(order, cap.key, width=width)
        output.write_png(out_dir / rel, grid.to_pil(), compress_level=level)
        drawn.append(LayerResult(*common, grid.channels_shown, grid.channels_total, rel.as_posix()))
    return drawn


def summaries(batch: torch.Tensor) -> list[tuple[float, float, float]]:
    """Per image of a batch: min, max and mean over finite values (NaN when there are none).

    One vectorized pass per layer and batch; the masked path runs only for rows holding NaN
    or Inf.
    """
    import torch

    flat = batch.reshape(batch.shape[0], -1)
    if flat.shape[1] == 0:
        return [(math.nan, math.nan, math.nan)] * flat.shape[0]
    lo, hi = torch.aminmax(flat, dim=1)
    mean = flat.mean(dim=1)
    rows = list(zip(lo.tolist(), hi.tolist(), mean.tolist(), strict=True))
    for i, row in enumerate(rows):
        if not all(math.isfinite(v) for v in row):
            finite = flat[i][flat[i].isfinite()]
            rows[i] = (
                (float(finite.min()), float(finite.max()), float(finite.mean()))
                if finite.numel()
                else (math.nan, math.nan, math.nan)
            )
    return rows
