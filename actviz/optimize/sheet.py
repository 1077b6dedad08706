"""One sheet per layer: every optimized image with its channel and final value."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render import fmt_value
from actviz.render.panels import Panel, panel_sheet

__all__ = ["TILE", "layer_sheet"]

#: The largest side of an image on a sheet; bigger images are shrunk (the PNGs keep them whole).
TILE = 128
#: Each objective in words, and the label of its images.
_WORDS = {
    "channel": ("channel mean", "c"),
    "neuron": ("centre unit", "c"),
    "logit": ("class logit", "class"),
    "output": ("output dimension", "dim"),
}


def _shrunk(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    if max(pixels.shape[:2]) <= TILE:
        return pixels

    image = Image.fromarray(pixels).resize((TILE, TILE), Image.Resampling.LANCZOS)
    return np.asarray(image, dtype=np.uint8)


def layer_sheet(
    key: str,
    shape: Sequence[int],
    finals: Sequence[tuple[int, float]],
    images: Sequence[npt.NDArray[np.uint8]],
    *,
    steps: int,
    objective: str,
    random_weights: bool,
) -> npt.NDArray[np.uint8]:
    """The sheet of one layer, ``(H, W, 3)`` uint8.

    Args:
        key: The layer's name.
        shape: Its output shape for one batch.
        finals: ``(channel, final objective)`` per image, in order.
        images: The images, ``(size, size, 3)`` uint8 each.
        steps: How many steps made them.
        objective: ``channel`` (its mean), ``neuron``, ``logit`` (a class logit) or
            ``output`` (a dimension of the output of a model that gives features).
        random_weights: Say that the network is untrained.
    """
    what, unit = _WORDS[objective]
    lines = [
        f"output {' x '.join(str(n) for n in shape[1:])}; {len(images)} images optimized for "
        f"{steps} steps each to maximize the {what}; value under each: the {what} the final "
        "image gives",
    ]
    if random_weights:
        lines.append("RANDOM WEIGHTS: an untrained network; these images are noise with structure")
    panels = [
        Panel(_shrunk(pixels), f"{unit} {channel}: {fmt_value(value)}")
        for (channel, value), pixels in zip(finals, images, strict=True)
    ]
    wants = {"logit": "each class", "output": "each output dimension"}.get(
        objective, "each channel"
    )
    return panel_sheet(f"{key}: what {wants} wants", lines, panels, columns=8)
