"""Before any optimization: one forward of a grey image tells each layer's output shape (so a
channel beyond a layer is refused before anything is written) and which module made the
model's output (a linear head, or none: features)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.errors import ModelError
from actviz.hooks import HookSession, tensor_items

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.models import LoadedModel

__all__ = ["Probed", "probe", "reads_classes"]


@dataclass(frozen=True)
class Probed:
    """What one forward said.

    Attributes:
        shapes: Module name -> the shape of its first output for one image; ``None`` -> the
            model's output.
        head: The module whose output the model returns as it is, when it is a linear layer
            (a 2-D weight): a classifier's head. None when the output is computed after the
            last module (a pooled feature) or by another kind of module.
    """

    shapes: dict[str | None, tuple[int, ...]]
    head: str | None


class _Probe(HookSession):
    """The first output shape of each target; the latest leaf module's output."""

    def __init__(self, model: nn.Module, targets: Sequence[str]) -> None:
        leaves = [n for n, m in model.named_modules() if n and next(m.children(), None) is None]
        super().__init__(model, list(dict.fromkeys([*targets, *leaves])), eval_mode=True)
        self.targets = set(targets)
        self.leaves = set(leaves)
        self.shapes: dict[str | None, tuple[int, ...]] = {}
        self.last: tuple[str, nn.Module, torch.Tensor] | None = None

    def _register(self, name: str, module: nn.Module) -> None:
        target, leaf = name in self.targets, name in self.leaves

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            call, _ = self._next_call(name)
            first = next(iter(tensor_items(output)), None)
            if first is None:
                return
            if target and call == 1:
                self.shapes[name] = tuple(first[1].shape)
            if leaf:
                self.last = (name, module, first[1])

        self._add_forward_hook(module, hook)

    def _start_record(self) -> None:
        super()._start_record()
        self.shapes = {}
        self.last = None


def probe(model: nn.Module, targets: Sequence[str], x: torch.Tensor) -> Probed:
    """Run ``model`` once on ``x`` (no gradients, eval mode) and say what its targets gave.

    Args:
        model: The model.
        targets: Qualified names of the modules whose output shapes are wanted.
        x: One input, batch dimension included.

    Raises:
        ModelError: If a target did not run or returned no tensor, or the model returned none.
    """
    import torch

    with _Probe(model, targets) as session, torch.no_grad():
        result = model(x)
        last = session.last
        shapes = dict(session.shapes)
    missing = [name for name in targets if name not in shapes]
    if missing:
        raise ModelError(
            f"layer {missing[0]} did not run or returned no tensor in the forward pass; "
            "choose another layer"
        )
    out = next(iter(tensor_items(result)), None)
    if out is None:
        raise ModelError("the model returns no tensor; optimize needs one")
    shapes[None] = tuple(out[1].shape)
    head = None
    if last is not None and last[2] is out[1]:
        weight = getattr(last[1], "weight", None)
        if weight is not None and getattr(weight, "dim", lambda: 0)() == 2:
            head = last[0]
    return Probed(shapes, head)


def reads_classes(loaded: LoadedModel, head: str | None) -> bool:
    """Whether the model's output is class logits.

    Its source says so first: a backbone (timm with no classes, a Hugging Face model without
    a classification head) gives features; weights that name their classes give logits. A
    model that says nothing of its classes (the user's own factory or module) counts as a classifier
    when its output comes straight from a linear head (``head``), not when it is computed
    after the last layer (a pooled feature map) or by another kind of layer.
    """
    if not loaded.classifier:
        return False
    if loaded.categories is not None:
        return True
    if loaded.source in ("factory", "module"):
        return head is not None
    return True
