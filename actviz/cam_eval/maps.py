"""The maps cam-eval scores: every method's on one layer for a batch (one forward and backward
shared by the gradient methods), and the model's last blocks re-initialised one at a time from
the output down for the sanity check (Adebayo et al., 2018, cascading randomization)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.gradients.nchw import CamLayout

__all__ = ["LayerShape", "last_blocks", "layer_shape", "method_maps", "randomized"]


@dataclass(frozen=True)
class LayerShape:
    """How the CAM layer's output is laid out (:func:`actviz.gradients.nchw.to_nchw`)."""

    layout: CamLayout = "nchw"
    grid: tuple[int, int] | None = None
    prefix_tokens: int = 1


def layer_shape(contexts: Mapping[str, Any], module: str) -> LayerShape:
    """The layout of ``module``'s output, from the model's layer contexts."""
    ctx = contexts.get(module)
    grid = ctx.token_grid if ctx is not None else None
    if grid:
        return LayerShape("tokens", grid, ctx.prefix_tokens if ctx is not None else 1)
    return LayerShape("nhwc" if ctx is not None and ctx.channels_last else "nchw")


def method_maps(
    model: nn.Module,
    x: torch.Tensor,
    layer: str,
    methods: Sequence[str],
    targets: Sequence[int],
    shape: LayerShape,
    *,
    batch_size: int = 64,
) -> dict[str, torch.Tensor]:
    """Each method's ``(B, h, w)`` maps in ``[0, 1]`` of ``targets`` at ``layer``, on the CPU.

    Raises:
        ModelError: If the layer gives no output or no gradient.
        UsageError: If its output is not a spatial map.
    """
    from actviz.gradients.core import compute_gradients
    from actviz.gradients.methods import raw_cam, scale_cams, score_cam

    result = compute_gradients(model, x, [layer], target=list(targets))
    capture = result.captures.get(layer)
    if capture is None:
        raise ModelError(f"no output and gradient of {layer}: pick another layer with --layers")
    maps: dict[str, torch.Tensor] = {}
    for method in methods:
        try:
            if method == "scorecam":
                raw = score_cam(
                    model,
                    x,
                    capture.activation,
                    targets,
                    layout=shape.layout,
                    grid=shape.grid,
                    prefix_tokens=shape.prefix_tokens,
                    batch_size=batch_size,
                )
            else:
                raw = raw_cam(
                    method,
                    capture.activation,
                    capture.gradient,
                    layout=shape.layout,
                    grid=shape.grid,
                    prefix_tokens=shape.prefix_tokens,
                )
        except ValueError as exc:
            raise UsageError(
                f"the output of {layer} {tuple(capture.activation.shape)} is not a spatial map "
                f"({exc}); pick a convolution, stage or encoder block with --layers"
            ) from None
        maps[method] = scale_cams(raw).cpu()
    return maps


def last_blocks(model: nn.Module, count: int) -> list[str]:
    """The model's last ``count`` blocks, from the output down: the children of its
    ``Sequential``/``ModuleList`` containers and its own top-level modules with parameters,
    outermost only, in registration order (which stands in for depth, as elsewhere)."""
    from torch import nn

    chosen: list[str] = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(c + ".") for c in chosen):
            continue
        parent_name = name.rpartition(".")[0]
        parent = model.get_submodule(parent_name) if parent_name else model
        numbered = isinstance(parent, nn.Sequential | nn.ModuleList)
        top_leaf = not parent_name and not isinstance(module, nn.Sequential | nn.ModuleList)
        has_params = any(True for _ in module.parameters())
        if has_params and (numbered or (top_leaf and not _holds_blocks(module))):
            chosen.append(name)
    return chosen[::-1][:count]


def _holds_blocks(module: nn.Module) -> bool:
    """Whether a top-level module holds numbered blocks (an encoder), chosen one by one."""
    from torch import nn

    return any(isinstance(m, nn.Sequential | nn.ModuleList) for m in module.modules())


def randomized(model: nn.Module, blocks: Sequence[str], seed: int) -> nn.Module:
    """A copy of ``model`` (same device, eval mode) with every module of ``blocks``
    re-initialised by its own ``reset_parameters`` (parameters without one: normal, std
    0.02), from ``seed``; buffers such as BatchNorm's running statistics are reset too."""
    import torch

    twin = copy.deepcopy(model).eval()
    cuda = [p.device.index or 0 for p in twin.parameters() if p.is_cuda][:1]
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        for block in blocks:
            for module in twin.get_submodule(block).modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
                elif any(True for _ in module.parameters(recurse=False)):
                    with torch.no_grad():
                        for p in module.parameters(recurse=False):
                            p.normal_(0.0, 0.02)
    return twin
