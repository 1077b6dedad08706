"""``list-layers``: every module of a model with its output shape, without weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.cards import listing_card
from actviz.errors import ActvizError, ModelError, UsageError, first_line
from actviz.hooks import ActivationRecorder, layer_refs
from actviz.models.families import FUSED_NOTE, QUANTIZED, family_named, family_of
from actviz.models.sources import source_for
from actviz.selectors import named_exactly, select_layers

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.hooks import ActivationRecorder
    from actviz.models.preprocessing import Preprocessing
    from actviz.models.sources import ModelSource

__all__ = [
    "LayerInfo",
    "LayerListing",
    "list_layers",
    "fold_never_ran",
]


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
    family: str = "classification"
    """The model's family (:mod:`actviz.models.families`)."""
    note: str | None = None
    """What the names mean, where the model changed them (a quantized model's fused layers)."""

    def __repr__(self) -> str:

        return listing_card(self).text()

    def _repr_html_(self) -> str:

        return listing_card(self).html()


def list_layers(
    model: str,
    *,
    layers: str | Sequence[str] | None = None,
    input_size: tuple[int, int] | None = None,
    in_chans: int = 3,
) -> LayerListing:
    """Every module of a model in the order it produces output, with output shapes.

    Shapes come from a forward on the ``meta`` device: no weights, no download, no memory, so
    even ``vit_l_16`` lists in seconds; the model's source builds it there. The user's own
    model is built by its factory (which runs the user's code); when it cannot be built or run
    on the meta device, it is built on the CPU and run once on zeros instead.

    Args:
        model: A model name from any source (``actviz models``), or
            ``package.module:factory`` or ``path/to/file.py:factory``.
        layers: Optional selector; matching rows are marked and counted (as in `run`,
            modules it sweeps in that never run are not marked).
        input_size: ``(height, width)`` of the input to trace with; default: the crop size of
            the model's default weights, 224 x 224 for the user's own model.
        in_chans: 3 for RGB input, 1 for greyscale.

    Raises:
        UnknownModelError: If the name is not in its source's registry.
        UsageError: If the factory spec is malformed or its file is missing, or
            ``input_size``/``in_chans`` cannot work.
        ModelError: If the model cannot be built or traced.
        LayerSelectionError: If the selector matches nothing.
    """

    if in_chans not in (1, 3):
        raise UsageError(f"--in-chans must be 1 or 3, not {in_chans}")
    source = source_for(model)
    source.check_name(model)
    preprocess = source.preprocessing(model, None, input_size=input_size, in_chans=in_chans)
    module, recorder, input_shape, stopped = _traced(source, model, preprocess, input_size)
    listing = listing_of(module, recorder, model=model, input_shape=input_shape, layers=layers)
    # Why the shapes are not from the meta device, or stop part way, where they are not.
    built_on_cpu = family_named(listing.family).meta
    notes = [n for n in (listing.note, built_on_cpu, stopped) if n]
    return dataclasses.replace(listing, note="; ".join(notes) or None)


def listing_of(
    module: nn.Module,
    recorder: ActivationRecorder,
    *,
    model: str,
    input_shape: tuple[int, ...],
    layers: str | Sequence[str] | None,
) -> LayerListing:
    """The listing of ``module`` from a recorder that traced it once with every module hooked:
    shapes, calls and parameters per module, the rows ``layers`` selects marked, its family
    and what its names mean (a quantized model's fused layers)."""

    refs = layer_refs(module)
    chosen = set(select_layers(refs, layers, model=model)) if layers else set()
    if layers:
        # As `run` does: what the selector swept in but never runs is not marked.
        explicit = named_exactly(refs, layers)
        idle = {name for name in chosen if name not in explicit and recorder.calls(name) == 0}
        if len(idle) < len(chosen):
            chosen -= idle
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
    # A capture whose rows cannot be attributed to images is refused by run: no grid.
    grids = sum(
        sum(1 for cap in recorder.captures if cap.module == row.name and cap.refused is None)
        for row in rows
        if row.selected
    )
    family = family_of(module)
    return LayerListing(
        model=model,
        input_shape=input_shape,
        family=family.key,
        note=FUSED_NOTE if family is QUANTIZED else None,
        layers=rows,
        selector=None
        if layers is None
        else (layers if isinstance(layers, str) else ",".join(layers)),
        grids=grids,
    )


def fold_never_ran(
    refs: Sequence[Any], selector: str | Sequence[str], names: Sequence[str], never_ran: set[str]
) -> tuple[list[str], list[str]]:
    """The selected modules that ran, and the warnings about those that did not.

    ``all`` on vit_b_16 sweeps in the 12 ``out_proj`` layers that its attention never calls as
    modules (their weights are used by a function); Swin's unused heads and Inception's
    auxiliary classifier are built but never called in eval mode either. What a selector swept
    in (``all``, a type, a glob, a regular expression) and never ran is dropped with one
    warning for all of them; a module the user typed by its exact name keeps its own "never
    ran" warning. When nothing ran at all, each gets its own warning.

    Args:
        refs: The model's :func:`~actviz.hooks.layer_refs`.
        selector: The selector that chose ``names``.
        names: The selected module names, in order.
        never_ran: Those of ``names`` the forward passes never called.

    Returns:
        The names that ran, in order, and the warnings.
    """

    idle = [name for name in names if name in never_ran]
    if not idle:
        return list(names), []
    explicit = named_exactly(refs, selector)
    swept = [name for name in idle if name not in explicit]
    if len(idle) == len(names):
        swept = []
    warnings = []
    if swept:
        shown = ", ".join(swept[:_SKIPPED_SHOWN]) + ("..." if len(swept) > _SKIPPED_SHOWN else "")
        many = len(swept) != 1
        warnings.append(
            f"{len(swept)} selected module{'s' if many else ''} never run{'' if many else 's'} "
            f"in the forward pass and {'were' if many else 'was'} skipped: {shown}"
        )
    warnings += [
        f"layer {name} was selected but never ran in the forward pass"
        for name in idle
        if name not in swept
    ]
    return [name for name in names if name not in swept], warnings


#: Names listed in the warning about skipped modules before "...".
_SKIPPED_SHOWN = 3


def _traced(
    source: ModelSource,
    model: str,
    preprocess: Preprocessing,
    input_size: tuple[int, int] | None,
) -> tuple[nn.Module, ActivationRecorder, tuple[int, ...], str | None]:
    """The model traced on the meta device or, where its source allows, on the CPU on zeros;
    with the input shape it was traced with (its family's preprocessing decides it) and why
    the trace stopped early, if it did."""
    import torch

    build = source.build_meta(model, input_size)
    if build.module is not None:
        input_shape = traced_input_shape(build.module, preprocess, input_size)
        family = family_of(build.module)
        meta = torch.device("meta")
        try:
            if family.meta_stops is not None:
                recorder, stopped = trace_until_stopped(build.module, input_shape, meta)
                return build.module, recorder, input_shape, family.meta_stops if stopped else None
            return build.module, trace(build.module, input_shape, meta), input_shape, None
        except ActvizError as exc:
            if build.on_cpu is None or not isinstance(exc, ModelError):
                raise
        except Exception as exc:  # an op without a meta kernel, or a shape the model refuses
            if build.on_cpu is None:
                raise ModelError(
                    f"cannot trace {model} on the meta device with input {input_shape}: "
                    f"{first_line(exc)}; check --input-size and --in-chans"
                ) from exc
    assert build.on_cpu is not None  # a source without a CPU fallback builds on meta
    module = build.on_cpu()
    input_shape = traced_input_shape(module, preprocess, input_size)
    try:
        return module, trace(module, input_shape, torch.device("cpu")), input_shape, None
    except Exception as exc:  # the user's forward: report it, whatever it raised
        raise ModelError(
            f"cannot run {model} on a zero input of shape {input_shape}: "
            f"{type(exc).__name__}: {first_line(exc)}; pass the input size and channels "
            "the model takes (--input-size H,W, --in-chans)"
        ) from exc


def traced_input_shape(
    module: nn.Module, preprocess: Preprocessing, input_size: tuple[int, int] | None
) -> tuple[int, ...]:
    """``(1, C, H, W)`` of the input a trace feeds: the size the family's preprocessing
    gives (a detector's ``min_size``), unless ``--input-size`` asks for another; a video
    model's clip ``(1, C, T, H, W)`` and an optical-flow model's pair ``(1, C, 2, H, W)`` as
    their families feed them, so that the listing says what the model takes."""
    fed = family_of(module).preprocessing(preprocess, module)
    if input_size is None:
        preprocess = fed
    height, width = preprocess.crop_size
    return (1, preprocess.channels, *fed.input_axes, height, width)


def trace_until_stopped(
    module: nn.Module, input_shape: tuple[int, ...], device: torch.device
) -> tuple[ActivationRecorder, bool]:
    """:func:`trace` for a family whose forward cannot finish on the meta device: what ran
    before it stopped, and whether it stopped."""
    recorder = _recorder(module)
    with recorder:
        try:
            _forward_zeros(module, input_shape, device)
        except (RuntimeError, NotImplementedError):
            return recorder, True
    return recorder, False


def trace(
    module: nn.Module, input_shape: tuple[int, ...], device: torch.device
) -> ActivationRecorder:
    """One forward on zeros with every module hooked for its output shape and call count."""
    recorder = _recorder(module)
    with recorder:
        _forward_zeros(module, input_shape, device)
    return recorder


def trace_with(module: nn.Module, data: Any) -> ActivationRecorder:
    """One forward on an example input, as the model is called (a tensor, a tuple of
    arguments or a dict of keywords), with every module hooked."""
    import torch

    recorder = _recorder(module)
    with recorder, torch.inference_mode():
        if isinstance(data, dict):
            module(**data)
        elif isinstance(data, (tuple, list)):
            module(*data)
        else:
            module(data)
    return recorder


def _recorder(module: nn.Module) -> ActivationRecorder:

    module.eval()
    names = [ref.name for ref in layer_refs(module)]
    return ActivationRecorder(module, names, keep_tensors=False, per_image=True)


def _forward_zeros(module: nn.Module, input_shape: tuple[int, ...], device: torch.device) -> None:
    """The model on zeros, fed as its family feeds it."""
    import torch

    with torch.inference_mode():
        family_of(module).call(module, torch.zeros(input_shape, device=device))
