"""The class a cell supports: ``argmax(W . mean + b)``, where the layer reaches a linear readout
through pooling (the approximation of Carter et al.'s Activation Atlas).

Whether it does is measured, not assumed per architecture: on a probe batch (noise from a
fixed seed) the layer's maps are averaged over their positions and put through each linear
layer of the model's output size whose input is the layer's channels; when one of them gives
the model's logits (to float rounding), that one is the readout. A ResNet's last stage reaches
its ``fc`` through the average pool; a layer with a nonlinearity, a normalization or another
pooling before the logits (ConvNeXt's LayerNorm, a ViT's class token) does not, and the cells
then say so instead of naming a class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.atlas.points import maps_for
from actviz.hooks import HookSession, tensor_items

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["Readout", "find_readout"]

#: Probe images.
_PROBES = 4
_SEED = 1
#: How close the logits must be, relative to their spread.
_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Readout:
    """The linear readout the layer reaches through pooling, or why there is none.

    Attributes:
        module: The linear layer's name, or None.
        weight: ``(classes, C)`` float64.
        bias: ``(classes,)`` float64.
        reason: Why there is no readout (None when there is).
    """

    module: str | None
    weight: npt.NDArray[np.float64] | None = None
    bias: npt.NDArray[np.float64] | None = None
    reason: str | None = None

    def classes(self, means: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.int64] | None:
        """``argmax(W . mean + b)`` of each row of ``means``; None without a readout."""
        if self.weight is None or self.bias is None:
            return None
        logits = np.asarray(means, np.float64) @ self.weight.T + self.bias
        classes: npt.NDArray[np.int64] = np.argmax(logits, axis=1).astype(np.int64)
        return classes

    def describe(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "linear": self.module is not None,
            "module": self.module,
            "rule": "argmax(W . mean + b) of the cell's mean vector"
            if self.module is not None
            else None,
            "reason": self.reason,
        }


class _Probe(HookSession):
    """The layer's output of one forward (a copy)."""

    def __init__(self, model: nn.Module, plan: LayerPlan) -> None:
        super().__init__(model, [plan.module], eval_mode=True)
        self.plan = plan
        self.output: torch.Tensor | None = None

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            for element, tensor in tensor_items(output):
                if key + element == self.plan.key:
                    self.output = tensor.detach().float().clone()

        self._add_forward_hook(module, hook)


def find_readout(loaded: LoadedModel, plan: LayerPlan) -> Readout:
    """The linear readout the pooled layer reaches, measured on a probe batch."""
    import torch
    from torch import nn

    if not loaded.classifier:
        return Readout(None, reason=f"{loaded.name} has no classifier: no class to support")
    module = loaded.module
    size = loaded.input_size
    generator = torch.Generator().manual_seed(_SEED)
    channels = loaded.preprocess.mean
    x = torch.randn((_PROBES, len(channels), *size), generator=generator).to(loaded.device)
    probe = _Probe(module, plan)
    with probe, torch.inference_mode():
        logits = loaded.family.call(module, x)
    logits = next(iter(tensor_items(logits)), (None, None))[1]
    if probe.output is None or logits is None or logits.ndim != 2:
        return Readout(None, reason="the model's output is not one vector of class scores")
    maps = maps_for(probe.output, plan)
    if maps is None:
        return Readout(None, reason=f"layer {plan.key} cannot be read as maps on a probe input")
    pooled = maps.mean(dim=(2, 3)).double()
    target = logits.double()
    spread = float(target.std()) or 1.0
    candidates = [
        (name, m)
        for name, m in module.named_modules()
        if isinstance(m, nn.Linear)
        and m.in_features == plan.channels
        and m.out_features == target.shape[1]
    ]
    for name, linear in reversed(candidates):  # the readout is the last one, usually
        weight = linear.weight.detach().double()
        bias = (
            linear.bias.detach().double()
            if linear.bias is not None
            else torch.zeros(weight.shape[0], dtype=torch.float64, device=weight.device)
        )
        guess = pooled.to(weight.device) @ weight.T + bias
        if float((guess - target.to(weight.device)).abs().max()) <= _TOLERANCE * spread:
            return Readout(name, weight.cpu().numpy(), bias.cpu().numpy())
    return Readout(
        None,
        reason=(
            f"the spatial mean of {plan.key} does not give the logits through one linear "
            "layer (a nonlinearity, a normalization or another pooling lies between): the "
            "cells name no supported class; choose the last layer before the pooling and the "
            "classifier for one"
        ),
    )
