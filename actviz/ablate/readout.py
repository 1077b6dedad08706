"""The linear-readout shortcut: where the rest of the model after the layer is a global average
pool and one linear layer (torchvision's CNNs from their last stage, timm's pooled heads), the
logits are ``W @ mean(a) + b``, so changing coordinate ``j`` of the output by ``dv`` at every
position moves them by ``mean(dv) * (W @ d_j)`` exactly, ``d_j`` its write direction. Every
single-unit ablation of a sweep is then one product, with no pass through the rest.

Read off the suffix's fx graph (a pool over the spatial axes, a flatten, dropout or identity,
one ``nn.Linear`` and nothing else) and checked against the suffix on the probe batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import fx

__all__ = ["Readout", "linear_readout", "pooled"]


@dataclass(frozen=True)
class Readout:
    """``logits = pooled(a) @ weight.T + bias``."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    linear: str
    """The linear module's name."""

    def logits(self, pooled_values: torch.Tensor) -> torch.Tensor:
        out = pooled_values @ self.weight.T.float()
        return out if self.bias is None else out + self.bias.float()


def pooled(a: torch.Tensor) -> torch.Tensor:
    """``(B, C)``: each channel's mean over every position of a ``(B, C, ...)`` batch."""
    a = a.float()
    return a.flatten(2).mean(dim=2) if a.ndim > 2 else a


def _is_spatial_pool(node: fx.Node, module: Any) -> bool:
    from torch import nn
    from torch.nn import functional as F

    def whole(size: Any) -> bool:
        return size in (1, (1, 1), [1, 1])

    if node.op == "call_module":
        return isinstance(module, nn.AdaptiveAvgPool2d) and whole(module.output_size)
    if node.op == "call_function" and node.target is F.adaptive_avg_pool2d:
        return whole(node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size"))
    if (node.op == "call_method" and node.target == "mean") or (
        node.op == "call_function" and getattr(node.target, "__name__", "") == "mean"
    ):
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        dims = tuple(dims) if isinstance(dims, list | tuple) else (dims,)
        return set(dims) in ({2, 3}, {-1, -2})
    return False


def _is_flatten(node: fx.Node, module: Any) -> bool:
    import torch
    from torch import nn

    if node.op == "call_module":
        return isinstance(module, nn.Flatten) and module.start_dim == 1 and module.end_dim == -1
    start = node.args[1] if len(node.args) > 1 else node.kwargs.get("start_dim", 0)
    if node.op == "call_function" and node.target is torch.flatten:
        return bool(start == 1)
    return node.op == "call_method" and node.target == "flatten" and bool(start == 1)


def _is_identity(node: fx.Node, module: Any) -> bool:
    from torch import nn

    return node.op == "call_module" and (
        isinstance(module, nn.Identity) or (isinstance(module, nn.Dropout) and not module.training)
    )


def linear_readout(suffix: fx.GraphModule) -> Readout | None:
    """The readout of a suffix that is (pool, flatten, dropout) then one linear layer; None
    for any other suffix."""
    from torch import nn

    nodes = list(suffix.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        return None
    current, linear = inputs[0], None
    pooled_already = flattened = False
    for node in nodes[len(inputs) :]:
        if node.op == "output":
            result = node.args[0]
            if linear is None or result is not current:
                return None
            break
        if linear is not None or not node.args or node.args[0] is not current:
            return None
        if len(current.users) != 1:
            return None
        module = suffix.get_submodule(str(node.target)) if node.op == "call_module" else None
        if isinstance(module, nn.Linear):
            linear = module
        elif not pooled_already and not flattened and _is_spatial_pool(node, module):
            pooled_already = True
        elif _is_flatten(node, module):
            flattened = True
        elif not _is_identity(node, module):
            return None
        current = node
    if linear is None:
        return None
    name = next(str(n.target) for n in nodes if n.op == "call_module" and n is current)
    return Readout(linear.weight.detach(), _bias(linear), name)


def _bias(linear: Any) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach()
