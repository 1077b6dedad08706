"""The optimization loop: many channels of one layer optimized together, one per image.

Every step: the images from their spectra (:mod:`actviz.optimize.param`), Lucent's random
transforms (:mod:`actviz.optimize.transforms`), the model's normalization, a forward that stops
at the layer (its hook raises once the output is kept, so later layers never run), and one Adam
step on the sum of the objectives. Adam works element by element, so image ``i`` follows the
same path it would alone; the batch shares one forward and one backward. The model's weights
are frozen meanwhile and the hooks removed afterwards (:class:`actviz.hooks.HookSession`).
"""

from __future__ import annotations

import contextlib
import random
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from actviz.cards import side_by_side
from actviz.errors import ModelError
from actviz.hooks import HookSession, tensor_items
from actviz.optimize.objective import Objective, objective_for
from actviz.optimize.param import FourierImage
from actviz.optimize.transforms import standard

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.layouts import LayerContext

__all__ = ["BatchResult", "LayerTarget", "optimize_batch", "seed_for"]

#: Lucent's learning rate.
LEARNING_RATE = 0.05


class _Reached(Exception):
    """Raised by the hook once the layer's output is kept: nothing after it needs to run."""


class LayerTarget(HookSession):
    """Keeps the first output tensor of one module's first call, with its graph; with
    ``stop`` the forward ends there. ``layer=None`` keeps the model's own output instead.

    Args:
        model: The model.
        layer: The module's qualified name, or None for the model's output.
        stop: End the forward at the layer.
    """

    def __init__(self, model: nn.Module, layer: str | None, *, stop: bool = True) -> None:
        super().__init__(model, [layer] if layer is not None else [], eval_mode=True)
        self.layer = layer
        self.stop = stop
        self.output: torch.Tensor | None = None

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            call, _ = self._next_call(name)
            if call != 1:
                return
            first = next(iter(tensor_items(output)), None)
            if first is None:
                raise ModelError(f"layer {name} returns no tensor; choose another layer")
            self.output = first[1]
            if self.stop:
                raise _Reached

        self._add_forward_hook(module, hook)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on ``x`` and return the layer's output (or the model's)."""
        self.output = None
        try:
            result = self.model(x)
        except _Reached:
            pass
        else:
            if self.layer is None:
                self.output = next(iter(tensor_items(result)))[1]
        if self.output is None:
            raise ModelError(f"layer {self.layer} did not run in the forward pass")
        return self.output


@contextlib.contextmanager
def frozen(model: nn.Module) -> Iterator[None]:
    """No gradients for the weights inside the block (only the images learn); restored after."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def seed_for(seed: int, layer: str | None, channel: int) -> int:
    """The seed of one channel's initial image: the same whatever else shares its batch."""

    return (seed * 1_000_003 + zlib.crc32((layer or "").encode()) + channel * 7919) % 2**63


@dataclass
class BatchResult:
    """What one batch gave.

    Attributes:
        images: ``(B, size, size, 3)`` uint8, one per channel.
        curves: ``(steps, B)`` the objective of each image at each step (transformed input).
        final: ``(B,)`` the objective of each final image as it is (no transforms).
        output_shape: The layer's output shape for one batch, batch dimension included.
    """

    images: npt.NDArray[np.uint8]
    curves: npt.NDArray[np.float32]
    final: npt.NDArray[np.float32]
    output_shape: tuple[int, ...]

    def _repr_png_(self) -> bytes:
        """The first optimized images side by side (a cell shows them)."""

        return side_by_side(self.images)


def optimize_batch(
    model: nn.Module,
    layer: str | None,
    channels: Sequence[int],
    *,
    steps: int,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device | str,
    seed: int = 0,
    neuron: bool = False,
    lr: float = LEARNING_RATE,
    ctx: LayerContext | None = None,
    grey: bool = False,
    model_size: tuple[int, int] | None = None,
    on_step: Callable[[], None] | None = None,
    objective: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> BatchResult:
    """Optimize one image per channel of one layer, all in one batch.

    Args:
        model: The model, on ``device``.
        layer: The module's qualified name, or None for the model's output (class logits).
        channels: Image ``i`` maximizes ``channels[i]``.
        steps: Adam steps.
        size: Side of the square images.
        mean: The model's normalization mean per input channel.
        std: Its standard deviation.
        device: Where the images live.
        seed: Seeds the initial images and the transforms.
        neuron: Maximize the centre unit of the channel instead of its mean.
        lr: Adam's learning rate.
        ctx: What the model's structure says about the layer: its layout, so the objective
            reads the positions ``run`` draws (a token layer's patch grid without its class
            and register tokens).
        grey: Feed the mean of the three colours (a model that takes one input channel).
        model_size: Resize each transformed batch to this ``(height, width)`` before the
            model: for models that take one input size only (vision transformers). None
            feeds the transformed size, as Lucent does.
        on_step: Called after each step.
        objective: What image ``i`` maximizes, given the layer's output (``(B,)`` values):
            another objective than a channel (an atlas cell's direction, :class:`~actviz.
            optimize.objective.Direction`); ``channels`` then only seed the images.

    Returns:
        The images, their curves and final values.

    Raises:
        ModelError: If the layer does not run or returns no tensor.
        UsageError: If it has fewer channels, or its first dimension is not the batch.
    """
    import torch

    rng = random.Random(seed)
    param = FourierImage([seed_for(seed, layer, c) for c in channels], size, device)
    optimizer = torch.optim.Adam(param.parameters(), lr=lr)
    centre = torch.tensor(list(mean), device=device).view(1, -1, 1, 1)
    spread = torch.tensor(list(std), device=device).view(1, -1, 1, 1)

    def prepared(image: torch.Tensor) -> torch.Tensor:
        if model_size is not None and tuple(image.shape[-2:]) != model_size:
            image = torch.nn.functional.interpolate(
                image, size=model_size, mode="bilinear", align_corners=False, antialias=True
            )
        if grey:
            image = image.mean(dim=1, keepdim=True)
        return ((image - centre) / spread).contiguous()

    values: list[torch.Tensor] = []
    given = objective
    with frozen(model), LayerTarget(model, layer) as target, torch.enable_grad():
        scoring: Callable[[torch.Tensor], torch.Tensor] | None = None
        shape: tuple[int, ...] = ()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            output = target.forward(prepared(standard(param(), rng)))
            if scoring is None:
                shape = tuple(output.shape)
                scoring = given or _objective(output, channels, neuron, ctx, layer)
            value = scoring(output)
            (-value.sum()).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            values.append(value.detach())
            if on_step is not None:
                on_step()
        with torch.no_grad():
            images = param()
            output = target.forward(prepared(images))
            if scoring is None:
                shape = tuple(output.shape)
                scoring = given or _objective(output, channels, neuron, ctx, layer)
            final = scoring(output).float().cpu().numpy()
    pixels = (images.detach().permute(0, 2, 3, 1).clamp(0, 1) * 255).round().to(torch.uint8)
    curves = torch.stack(values).float().cpu().numpy() if values else np.zeros((0, len(channels)))
    return BatchResult(
        images=pixels.cpu().numpy(),
        curves=curves.astype(np.float32),
        final=final.astype(np.float32),
        output_shape=shape,
    )


def _objective(
    output: torch.Tensor,
    channels: Sequence[int],
    neuron: bool,
    ctx: LayerContext | None,
    layer: str | None,
) -> Objective:
    if layer is None:
        return objective_for(
            output,
            channels,
            neuron=neuron,
            ctx=ctx,
            where="the model's output",
            flag="--objective",
            unit="outputs",
        )
    return objective_for(output, channels, neuron=neuron, ctx=ctx, where=f"layer {layer}")
