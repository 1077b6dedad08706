"""What is maximized: one channel (or one unit, or one class logit) per image of the batch.

Image ``i`` of a batch maximizes channel ``channels[i]``: its mean over the layer's spatial
positions (Lucent's ``channel`` objective), or with ``neuron`` its value at the centre position
(Lucent's ``neuron``). Where the channels are depends on the layer's layout, decided from the
output's shape and the model's structure as the grids decide it (:mod:`actviz.layouts`):
channels first for ``(B, C, H, W)`` and ``(B, C)``; channels last for channels-last blocks,
token sequences and windows. A model's output ``(B, classes)`` is a vector layer, so a class
logit is channel ``class`` of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

    from actviz.layouts import LayerContext

__all__ = ["Objective", "channel_axis", "parse_channels"]


def parse_channels(text: str) -> list[int]:
    """``0-15``, ``3,7,9-11`` -> the channel numbers, in order, without repeats.

    Raises:
        UsageError: For anything else.
    """
    chosen: list[int] = []
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise UsageError(
                f"--channels takes numbers and ranges like 0-15 or 3,7,9-11; got '{text}'"
            ) from None
        if low < 0 or high < low:
            raise UsageError(f"--channels: '{part}' is not a range of channels from 0 up")
        chosen.extend(c for c in range(low, high + 1) if c not in chosen)
    return chosen


def channel_axis(shape: Sequence[int], ctx: LayerContext | None) -> int:
    """The axis of the channels in a batched output of this shape: 1 for channels-first maps
    and vectors, the last for channels-last blocks and tokens."""
    from actviz.layouts import plan_layout

    if len(shape) <= 2:
        return 1
    decided = plan_layout(tuple(shape[1:]), ctx)
    return 1 if decided.layout in ("nchw", "vector") and len(shape) == 4 else len(shape) - 1


@dataclass(frozen=True)
class Objective:
    """Image ``i`` maximizes ``channels[i]`` of the output, its spatial mean or (``neuron``)
    its centre value.

    Attributes:
        channels: One channel per image of the batch.
        neuron: The centre position's value instead of the spatial mean.
        axis: The channel axis of the batched output (see :func:`channel_axis`).
    """

    channels: tuple[int, ...]
    neuron: bool
    axis: int

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        """The value each image maximizes, ``(B,)``."""
        import torch

        index = torch.tensor(self.channels, device=output.device)
        moved = output.movedim(self.axis, 1)  # (B, C, ...)
        picked = moved[torch.arange(len(self.channels), device=output.device), index]
        flat = picked.reshape(len(self.channels), -1)  # positions of each image's channel
        if self.neuron:
            # The centre of the spatial positions: of the grid for maps, of the sequence for
            # tokens.
            if picked.dim() == 3:
                return picked[:, picked.shape[1] // 2, picked.shape[2] // 2]
            return flat[:, flat.shape[1] // 2]
        return flat.mean(dim=1)
