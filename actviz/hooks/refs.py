"""The selector's view of a model's modules, the tensors inside a hook's output, and the
check that a model's hooks will fire."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError
from actviz.selectors import LayerRef

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["activations", "check_hookable", "layer_refs", "tensor_items"]


def layer_refs(model: nn.Module) -> list[Any]:
    """The selector's view of a model's modules, in registration order."""

    refs = []
    for name, module in model.named_modules():
        if not name:
            continue
        types = tuple(
            cls.__name__ for cls in type(module).__mro__ if cls.__name__ not in ("object",)
        )
        refs.append(LayerRef(name, types, leaf=next(iter(module.children()), None) is None))
    return refs


def activations(output: object) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`tensor_items`, each as the values it stands for: a quantized model's ``quint8``
    outputs dequantized, as the recorders record them and ``run`` draws them."""
    for element, tensor in tensor_items(output):
        yield element, tensor.dequantize() if tensor.is_quantized else tensor


def check_hookable(model: nn.Module, name: str = "the model") -> None:
    """Refuse models whose forward hooks may silently not fire (``name``: how messages call it).

    Raises:
        ModelError: For TorchScript and ``torch.compile``'d models.
    """
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        raise ModelError(
            f"{name} is a TorchScript module, whose forward hooks do not fire reliably; "
            "pass the eager nn.Module instead"
        )
    if hasattr(model, "_orig_mod"):
        raise ModelError(
            f"{name} is a torch.compile'd module, which may skip forward hooks; pass the "
            "module before compiling it (its ._orig_mod)"
        )


def tensor_items(output: object, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a hook's output, with its suffix: "" for a bare tensor."""
    import torch

    if isinstance(output, torch.Tensor):
        yield prefix, output
    elif isinstance(output, Mapping):
        for key, value in output.items():
            yield from tensor_items(value, f"{prefix}[{key}]")
    elif isinstance(output, tuple) and hasattr(output, "_fields"):  # namedtuple
        for key, value in zip(output._fields, output, strict=True):
            yield from tensor_items(value, f"{prefix}[{key}]")
    elif isinstance(output, (tuple, list)):
        for index, value in enumerate(output):
            yield from tensor_items(value, f"{prefix}[{index}]")
