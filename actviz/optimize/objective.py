"""What is maximized: one channel (or one unit, or one class logit) per image of the batch.

Image ``i`` of a batch maximizes channel ``channels[i]``: its mean over the layer's spatial
positions (Lucent's ``channel`` objective), or with ``neuron`` its value at the centre position
(Lucent's ``neuron``). The positions are those the grids of ``run`` draw: the layer's layout is
decided from the output's shape and the model's structure (:mod:`actviz.layouts`), so a token
layer's class, register and distillation tokens are no positions (the mean leaves them out and
the centre is the middle patch of the token grid), channels-last blocks are read channels last
and partitioned windows are reassembled. A model's output ``(B, classes)`` is a vector layer, so
a class logit is channel ``class`` of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from actviz.errors import UsageError
from actviz.layouts import plan_layout, to_drawable

if TYPE_CHECKING:
    import torch

    from actviz.layouts import LayerContext

__all__ = [
    "Direction",
    "Objective",
    "channel_axis",
    "check_channels",
    "objective_for",
    "parse_channels",
    "positions",
]


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

    if len(shape) <= 2:
        return 1
    decided = plan_layout(tuple(shape[1:]), ctx)
    return 1 if decided.layout in ("nchw", "vector") and len(shape) == 4 else len(shape) - 1


#: Flat indices are carried through the layout in two float32 parts, each exact.
_SPLIT = 4096


def positions(shape: Sequence[int], ctx: LayerContext | None) -> npt.NDArray[np.int64] | None:
    """Where each channel's positions sit in one image's output, as ``run`` draws them.

    Args:
        shape: One image's output shape, without the batch dimension.
        ctx: What the model's structure says about the layer.

    Returns:
        ``(C, H, W)``: the flat index, into one image's output, of channel ``c`` at grid
        position ``(y, x)`` (a vector gives ``(C, 1, 1)``); prefix tokens have none. None when
        the output cannot be drawn as maps or a vector.
    """

    flat = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(tuple(shape))
    parts = []
    # The layout decision works on float32 values, exact up to 2**24: the index goes
    # through in two parts, each far below that.
    for part in (flat // _SPLIT, flat % _SPLIT):
        drawn = to_drawable(part.astype(np.float32), ctx)
        if drawn.array is None:
            return None
        parts.append(drawn.array.astype(np.int64))
    grid = parts[0] * _SPLIT + parts[1]
    return grid.reshape(grid.shape[0], 1, 1) if grid.ndim == 1 else grid


def check_channels(
    channels: Sequence[int], count: int, where: str, *, flag: str, unit: str
) -> None:
    """Refuse channels beyond an output of ``count`` channels, naming the count.

    Args:
        channels: The channels asked for.
        count: How many the output has.
        where: The output in words, ``layer conv1`` or ``the model's output``.
        flag: The option that asked for them: ``--channels`` or ``--objective``.
        unit: What they are, plural: ``channels``, ``classes``, ``output dimensions``.

    Raises:
        UsageError: For the first channel at or beyond ``count``.
    """
    beyond = [c for c in channels if c >= count]
    if not beyond:
        return
    raise UsageError(
        f"{flag} {beyond[0]}: {where} has {count} {unit} (0-{count - 1}); pick {flag} within "
        f"0-{count - 1}"
    )


@dataclass(frozen=True)
class Objective:
    """Image ``i`` maximizes ``channels[i]`` of the output, its spatial mean or (``neuron``)
    its centre value.

    Attributes:
        channels: One channel per image of the batch.
        neuron: The centre position's value instead of the spatial mean.
        axis: The channel axis of the batched output (see :func:`channel_axis`), for outputs
            that cannot be laid out as maps or a vector (every position of the channel then
            counts).
        ctx: What the model's structure says about the layer: the positions are read
            through its layout as ``run`` draws it (see :func:`positions`).
        layout: Read the positions through the layout; False reads them off ``axis``.
    """

    channels: tuple[int, ...]
    neuron: bool
    axis: int
    ctx: LayerContext | None = field(default=None, compare=False)
    layout: bool = True
    _where: dict[tuple[object, ...], torch.Tensor | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        """The value each image maximizes, ``(B,)``."""
        import torch

        count = len(self.channels)
        where = self.where(output) if self.layout else None
        if where is not None:
            grid = output.reshape(count, -1).gather(1, where.reshape(count, -1))
            grid = grid.reshape(where.shape)  # (B, H, W): each image's channel
            if self.neuron:
                return grid[:, grid.shape[1] // 2, grid.shape[2] // 2]
            return grid.mean(dim=(1, 2))
        index = torch.tensor(self.channels, device=output.device)
        moved = output.movedim(self.axis, 1)  # (B, C, ...)
        picked = moved[torch.arange(count, device=output.device), index]
        flat = picked.reshape(count, -1)  # positions of each image's channel
        if self.neuron:
            if picked.dim() == 3:
                return picked[:, picked.shape[1] // 2, picked.shape[2] // 2]
            return flat[:, flat.shape[1] // 2]
        return flat.mean(dim=1)

    def where(self, output: torch.Tensor) -> torch.Tensor | None:
        """``(B, H, W)`` int64 on the output's device: for image ``i``, the flat index into
        its own output of its channel at each grid position; None when the output has no
        such layout. Kept per shape: a CNN's maps change size with the random scaling."""
        import torch

        key = (tuple(output.shape[1:]), str(output.device))
        if key not in self._where:
            grid = positions(output.shape[1:], self.ctx)
            picked = None
            if grid is not None:
                picked = torch.from_numpy(grid[list(self.channels)]).to(output.device)
            self._where[key] = picked
        return self._where[key]


@dataclass(frozen=True)
class Direction:
    """Image ``i`` maximizes the layer's vector along ``directions[i]``, as Lucid's activation
    atlas renders its icons: ``(v . d) * cos(v, d) ** power`` with ``v`` the layer's vector
    (its spatial mean, or with ``neuron`` its centre position) and ``d`` the unit direction,
    so the image grows the direction rather than any large vector near it.

    Attributes:
        directions: ``(B, C)`` one direction per image (any length; made unit here).
        neuron: The centre position's vector instead of the spatial mean.
        ctx: What the model's structure says about the layer: the positions are read
            through its layout as ``run`` draws them (see :func:`positions`).
        power: The cosine's power (Lucid's ``cossim_pow``).
    """

    directions: npt.NDArray[np.float32]
    neuron: bool = False
    ctx: LayerContext | None = field(default=None, compare=False)
    power: float = 1.0

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        """The value each image maximizes, ``(B,)``."""
        import torch

        grid = positions(output.shape[1:], self.ctx)
        if grid is None:
            raise UsageError(
                f"an output of shape {tuple(output.shape[1:])} cannot be read as maps or a "
                "vector; choose another layer"
            )
        where = torch.from_numpy(grid).to(output.device)
        maps = output.reshape(output.shape[0], -1)[:, where]  # (B, C, H, W)
        if self.neuron:
            vector = maps[:, :, maps.shape[2] // 2, maps.shape[3] // 2]
        else:
            vector = maps.mean(dim=(2, 3))
        d = torch.as_tensor(self.directions, device=output.device, dtype=vector.dtype)
        d = d / d.norm(dim=1, keepdim=True).clamp_min(1e-12)
        along = (vector * d).sum(dim=1)
        cos = along / vector.norm(dim=1).clamp_min(1e-6)
        value: torch.Tensor = along * cos.clamp_min(0.1) ** self.power
        return value


def objective_for(
    output: torch.Tensor,
    channels: Sequence[int],
    *,
    neuron: bool,
    ctx: LayerContext | None,
    where: str,
    flag: str = "--channels",
    unit: str = "channels",
) -> Objective:
    """The objective of a batch whose image ``i`` maximizes ``channels[i]`` of ``output``.

    Args:
        output: The batched output, one image per channel.
        channels: One channel per image.
        neuron: The centre position instead of the mean.
        ctx: What the model's structure says about the layer (its layout).
        where: The output in words, for messages.
        flag: The option that chose the channels (see :func:`check_channels`).
        unit: What the channels are, plural.

    Raises:
        UsageError: If a channel is beyond the output's, or the output's first dimension is
            not the batch.
    """
    shape = tuple(output.shape)
    if len(shape) < 2 or shape[0] != len(channels):
        raise UsageError(
            f"{where} gives {shape[0] if shape else 0} rows for a batch of {len(channels)} "
            "images (its first dimension is not the batch, as in windowed attention); "
            "choose another layer"
        )
    grid = positions(shape[1:], ctx)
    axis = channel_axis(shape, ctx)
    count = shape[axis] if grid is None else grid.shape[0]
    check_channels(channels, count, where, flag=flag, unit=unit)
    return Objective(tuple(channels), neuron, axis, ctx, layout=grid is not None)
