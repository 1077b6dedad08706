"""Quantized models: torchvision's ``quantized_*`` builders (and a user's own model holding
quantized modules), built and quantized on the CPU with an engine the CPU supports.

Their outputs are ``quint8`` tensors: the hooks record them dequantized. Quantization fuses
conv + bn + relu into one module (``conv1`` becomes ``QuantizedConvReLU2d``; ``bn1`` and
``relu`` stay as ``Identity``), so the names are the fused model's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError
from actviz.models.families.base import Family

if TYPE_CHECKING:
    from torch import nn

__all__ = ["FUSED_NOTE", "QUANTIZED", "is_quantized", "quantized_engine"]

#: What ``list-layers`` says about a quantized model's names.
FUSED_NOTE = (
    "quantized model: conv+bn+relu are fused into one module (e.g. QuantizedConvReLU2d); "
    "the bn and relu that remain are Identity"
)


def quantized_engine() -> str:
    """The quantized engine torchvision's builders take that this CPU supports."""
    import torch

    engines = torch.backends.quantized.supported_engines
    for engine in ("fbgemm", "qnnpack"):  # the two torchvision's quantize_model configures
        if engine in engines:
            return engine

    raise ModelError(
        f"this CPU's PyTorch supports no quantized engine torchvision builds for "
        f"(fbgemm, qnnpack; it has {', '.join(engines) or 'none'}); run the float model instead"
    )


def is_quantized(module: nn.Module) -> bool:
    """True when the model holds quantized modules (``torch.ao.nn.quantized``)."""
    return any(
        type(sub).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized"))
        for sub in module.modules()
    )


def _builder_kwargs(input_size: tuple[int, int] | None) -> dict[str, Any]:
    return {"quantize": True, "backend": quantized_engine()}


QUANTIZED = Family(
    key="quantized",
    label="quantized",
    torchvision="quantization",
    claims=is_quantized,
    gradients=(
        "quantized kernels have no gradients; use the float model (the name without quantized_)"
    ),
    cpu_only="quantized kernels run on the CPU only: pass --device cpu",
    commands={
        "optimize": (
            "quantized kernels have no gradients to optimize through; optimize the float model "
            "(the name without quantized_)"
        ),
        "ablate": (
            "a quantized model's layers give quantized tensors, which ablate does not edit; "
            "use the float model (the name without quantized_)"
        ),
        "cam-eval": (
            "quantized kernels have no gradients for the CAMs it scores; use the float model "
            "(the name without quantized_)"
        ),
    },
    meta="quantized models are built and calibrated on the CPU",
    builder_kwargs=_builder_kwargs,
    outputs="(B, classes) scores, dequantized",
)
