"""``list-layers``: every module of a model with its output shape, without weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actviz.errors import ModelError

__all__ = ["LayerInfo", "LayerListing", "list_layers"]


@dataclass(frozen=True)
class LayerInfo:
    """One module as ``list-layers`` shows it."""

    name: str
    module_type: str
    shape: tuple[int, ...] | None
    calls: int
    params: int
    selected: bool


@dataclass(frozen=True)
class LayerListing:
    """The answer of :func:`list_layers`."""

    model: str
    input_shape: tuple[int, ...]
    layers: list[LayerInfo]
    selector: str | None
    grids: int


def list_layers(model: str, *, layers: str | Sequence[str] | None = None) -> LayerListing:
    """Every module of a model in the order it produces output, with output shapes.

    Shapes come from a forward on the ``meta`` device: no weights, no download, no memory, so
    even ``vit_l_16`` lists in seconds.

    Args:
        model: A torchvision model name.
        layers: Optional selector; matching rows are marked and counted.

    Raises:
        UnknownModelError: If the name is not in torchvision's registry.
        LayerSelectionError: If the selector matches nothing.
    """
    import torch
    from torchvision import models

    from actviz.hooks import ActivationRecorder, layer_refs
    from actviz.models import Preprocessing, _weights_enum, check_model_name
    from actviz.selectors import select_layers

    check_model_name(model)
    height, width = Preprocessing.for_weights(_default(model, _weights_enum)).crop_size
    with torch.device("meta"):
        module = models.get_model(model, weights=None)
    module.eval()
    refs = layer_refs(module)
    names = [r.name for r in refs]
    chosen = set(select_layers(refs, layers, model=model)) if layers else set()
    input_shape = (1, 3, height, width)
    recorder = ActivationRecorder(module, names, keep_tensors=False)
    try:
        with recorder, torch.inference_mode():
            module(torch.empty(input_shape, device="meta"))
    except Exception as exc:  # some ops have no meta kernel; shapes are then unknown
        raise ModelError(f"cannot trace {model} on the meta device: {exc}") from exc
    first_shape: dict[str, tuple[int, ...]] = {}
    order: dict[str, int] = {}
    for cap in recorder.captures:
        first_shape.setdefault(cap.module, cap.shape)
        order.setdefault(cap.module, len(order))
    modules = dict(module.named_modules())
    rows = [
        LayerInfo(
            name=ref.name,
            module_type=ref.type_name,
            shape=first_shape.get(ref.name),
            calls=recorder.calls(ref.name),
            params=sum(p.numel() for p in modules[ref.name].parameters()),
            selected=ref.name in chosen,
        )
        for ref in refs
    ]
    rows.sort(key=lambda row: order.get(row.name, len(order)))
    grids = sum(
        sum(1 for cap in recorder.captures if cap.module == row.name)
        for row in rows
        if row.selected
    )
    return LayerListing(
        model=model,
        input_shape=input_shape,
        layers=rows,
        selector=None
        if layers is None
        else (layers if isinstance(layers, str) else ",".join(layers)),
        grids=grids,
    )


def _default(model: str, enum_of: Any) -> Any:
    enum_cls = enum_of(model)
    return getattr(enum_cls, "DEFAULT", None) if enum_cls is not None else None
