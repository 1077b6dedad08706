"""The model cut at the ablated layer: the part up to it runs once per batch, the rest once per
group of ablations, the ablations stacked along the batch.

The cut is made with ``torch.fx`` as torchvision's ``create_feature_extractor`` makes it (its
``NodePathTracer``, torchvision's ops kept as leaf modules): the layer's output is the last
node of the module's scope; the prefix returns it with every other value the rest of the
graph needs (a residual branch's input, ...), and the suffix takes them back. A model fx cannot
trace, or whose cut does not give its own numbers back, runs whole instead: its output at the
layer recorded by a hook in the prefix and replaced by a hook in each stacked forward.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError, first_line
from actviz.hooks import HookSession

if TYPE_CHECKING:
    import torch
    from torch import fx, nn

__all__ = ["LayerTap", "Split", "split_model"]


class LayerTap(HookSession):
    """One module's output in every forward of the block: kept (a copy; ``keep``), counted,
    and replaced by ``edit(output)`` when ``edit`` is given."""

    def __init__(
        self,
        model: nn.Module,
        layer: str,
        *,
        keep: bool = False,
        edit: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__(model, [layer])
        self.keep = keep
        self.edit = edit
        self.taken: Any = None
        self.count = 0

    def _start_record(self) -> None:
        super()._start_record()
        self.count = 0

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> object:
            import torch

            self._next_call(name)
            self.count += 1
            if self.keep:
                self.taken = output.clone() if isinstance(output, torch.Tensor) else output
            if self.edit is None:
                return None
            if not isinstance(output, torch.Tensor):
                raise ModelError(f"{name} gives a {type(output).__name__}, not one tensor")
            return self.edit(output)

        self._keep(module.register_forward_hook(hook))


@dataclass
class Split:
    """How a batch reaches the layer once and the rest of the model once per stack.

    Attributes:
        prefix: ``x`` -> the layer's output and the other values the rest needs.
        suffix: ``(outputs, others, repeats)`` -> logits, where ``outputs`` holds ``repeats``
            versions of the batch's layer output one after the other along the batch.
        stacks: Whether versions may be stacked (else each runs alone, ``repeats`` 1).
        graph: The suffix as an fx graph module (None when the model runs whole).
        fallback: Why the model runs whole for each stack (None when it is cut).
    """

    prefix: Callable[[torch.Tensor], tuple[torch.Tensor, list[Any]]]
    suffix: Callable[[torch.Tensor, Sequence[Any], int], torch.Tensor]
    stacks: bool = True
    graph: fx.GraphModule | None = None
    fallback: str | None = None
    frontier: list[str] = field(default_factory=list)
    """The values the prefix hands the suffix, by node name (the layer's first)."""

    @property
    def method(self) -> str:
        return "whole forwards (hooks)" if self.graph is None else "torch.fx prefix and suffix"


def _repeat(value: Any, repeats: int) -> Any:
    import torch

    if repeats == 1 or not isinstance(value, torch.Tensor):
        return value
    return torch.cat([value] * repeats)


def _leaf_modules() -> list[type[Any]]:
    """torchvision's ops as leaf modules, as ``create_feature_extractor`` keeps them."""

    import torchvision
    from torch import nn

    members = inspect.getmembers(torchvision.ops)
    return [m for _, m in members if inspect.isclass(m) and issubclass(m, nn.Module)]


def _cut(module: nn.Module, layer: str) -> tuple[fx.GraphModule, fx.GraphModule, list[str]]:
    """The prefix and suffix graph modules of ``module`` at ``layer``, sharing its weights."""

    import torchvision
    from torch import fx
    from torchvision.models.feature_extraction import NodePathTracer

    tracer = NodePathTracer(autowrap_modules=(math, torchvision.ops), leaf_modules=_leaf_modules())
    graph = tracer.trace(module)
    names = tracer.node_to_qualname
    depth = layer.count(".")
    nodes = list(graph.nodes)
    target = next(
        (
            n
            for n in reversed(nodes)
            if n in names and ".".join(names[n].split(".")[: depth + 1]) == layer
        ),
        None,
    )
    if target is None:
        raise ValueError(f"no node of the traced graph comes from {layer}")
    cut = nodes.index(target)
    after = set(nodes[cut + 1 :])
    frontier = [
        n for n in nodes[: cut + 1] if n.op != "get_attr" and any(u in after for u in n.users)
    ]
    if target in frontier:
        frontier.remove(target)
    frontier.insert(0, target)
    head = fx.Graph()
    copied: dict[fx.Node, fx.Node] = {}
    for node in nodes[: cut + 1]:
        copied[node] = head.node_copy(node, lambda n: copied[n])
    head.output(tuple(copied[n] for n in frontier))
    prefix = fx.GraphModule(tracer.root, head, "AblatePrefix")
    prefix.graph.eliminate_dead_code()
    prefix.recompile()
    tail = fx.Graph()
    taken: dict[fx.Node, fx.Node] = {}
    for i, node in enumerate(frontier):
        taken[node] = tail.placeholder(f"frontier_{i}")

    def arg(node: fx.Node) -> fx.Node:
        if node not in taken:  # a parameter or buffer read before the cut
            taken[node] = tail.node_copy(node)
        return taken[node]

    for node in nodes[cut + 1 :]:
        taken[node] = tail.node_copy(node, arg)
    suffix = fx.GraphModule(tracer.root, tail, "AblateSuffix")
    return prefix, suffix, [names.get(n, n.name) for n in frontier]


def _graph_split(module: nn.Module, layer: str) -> Split:
    prefix, suffix, frontier = _cut(module, layer)

    def head(x: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
        values = prefix(x)
        return values[0], list(values[1:])

    def tail(outputs: torch.Tensor, others: Sequence[Any], repeats: int) -> torch.Tensor:
        return suffix(outputs, *(_repeat(v, repeats) for v in others))  # type: ignore[no-any-return]

    return Split(head, tail, graph=suffix, frontier=frontier)


def _whole_split(module: nn.Module, layer: str, call: Callable[[Any, Any], Any], why: str) -> Split:
    def head(x: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
        with LayerTap(module, layer, keep=True) as tap:
            call(module, x)
        return tap.taken, [x]

    def tail(outputs: torch.Tensor, others: Sequence[Any], repeats: int) -> torch.Tensor:
        with LayerTap(module, layer, edit=lambda _output: outputs):
            return call(module, _repeat(others[0], repeats))  # type: ignore[no-any-return]

    return Split(head, tail, fallback=why)


def _close(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    a, b = a.detach().float(), b.detach().float()
    scale = float(b.abs().max()) if b.numel() else 0.0
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5 * max(scale, 1e-6)))


def split_model(
    module: nn.Module,
    layer: str,
    x: torch.Tensor,
    call: Callable[[Any, Any], Any],
    *,
    model_name: str,
) -> Split:
    """The model cut at ``layer``, checked on the probe batch ``x`` (two images or more):
    the prefix gives the layer's output as a hook sees it, the suffix the model's logits, and
    two stacked copies twice the logits. Runs under ``torch.inference_mode``.

    Raises:
        UsageError: When the layer does not run exactly once in a forward, or its output
            is not one floating-point tensor.
        ModelError: When the model fails on the probe batch.
    """
    import torch

    with torch.inference_mode(), LayerTap(module, layer, keep=True) as tap:
        try:
            logits = call(module, x)
        except Exception as exc:
            raise ModelError(
                f"{model_name} failed on a probe batch of shape {tuple(x.shape)}: "
                f"{type(exc).__name__}: {first_line(exc)}; check --input-size and --in-chans"
            ) from exc
        count, output = tap.count, tap.taken
    if count != 1:
        said = "never runs" if count == 0 else f"runs {count} times"
        raise UsageError(
            f"{layer} {said} in a forward of {model_name}; ablate takes a module that runs "
            "once: pick its block or a convolution (actviz list-layers)"
        )
    if not isinstance(output, torch.Tensor) or not output.is_floating_point():
        kind = type(output).__name__ if not isinstance(output, torch.Tensor) else output.dtype
        raise UsageError(
            f"{layer} gives a {kind}, not one floating-point tensor; pick a module whose "
            "output is activations (actviz list-layers)"
        )
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise UsageError(
            f"{model_name} gives {type(logits).__name__} "
            f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else ''}, not (B, "
            "classes) scores; ablate measures a classifier"
        )
    try:
        split = _graph_split(module, layer)
        with torch.inference_mode():
            reached, others = split.prefix(x)
            if not _close(reached, output):
                raise ValueError(f"the traced graph's value at {layer} differs from its output")
            if not _close(split.suffix(reached, others, 1), logits):
                raise ValueError("the two parts do not give the model's logits")
            twice = split.suffix(torch.cat([reached, reached]), others, 2)
            split.stacks = _close(twice, torch.cat([logits, logits]))
        return split
    except Exception as exc:  # fx raises many kinds on code it cannot trace
        why = f"torch.fx cannot cut {model_name} at {layer} ({type(exc).__name__}: "
        return _whole_split(module, layer, call, why + f"{first_line(exc)[:160]})")
