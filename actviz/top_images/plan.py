"""Per layer, once per run: how its output becomes maps, and its receptive field.

Outputs are read through the same layout decisions as the grids (:func:`actviz.layouts.
to_drawable`): ViT tokens ``(B, 1 + H*W, C)`` lose their class token and become ``(C, H, W)``,
Swin and ConvNeXt channels-last blocks are transposed, MaxViT windows reassembled, vectors
become ``C`` maps of 1 x 1. The decision is made once per layer, on an index array of the
output's shape, and kept as a plain view (channels-first or channels-last) or an index to
gather with, so the scores of every batch are computed on the device with torch ops and no
per-image copy.

:func:`plan_layers` runs one probe batch (noise from a fixed seed) with gradients on: its
outputs give each layer's shape and, through :mod:`actviz.top_images.fields`, its receptive
field, measured from the model itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from actviz.errors import ModelError, first_line
from actviz.hooks import HookSession, activations
from actviz.layouts import layer_contexts, to_drawable
from actviz.statistics import judges_dead
from actviz.top_images.fields import ReceptiveField, measure_fields
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.layouts import LayerContext
    from actviz.models import LoadedModel

__all__ = [
    "LayerPlan",
    "Planned",
    "as_maps",
    "map_layout",
    "output_plan",
    "plan_layers",
    "plan_loaded",
    "positions",
]

Mode = Literal["nchw", "nhwc", "gather"]
#: Probe images: the centre, top-left and bottom-right cells are measured on one each.
PROBES = 3
_PROBE_SEED = 0


@dataclass(frozen=True, eq=False)
class LayerPlan:
    """How one capture's output is scored, decided once per run.

    Attributes:
        key: The capture key (``layer1.0.relu:2``, ``heads[out]``), as ``run`` names it.
        module: The module's qualified name.
        module_type: The module's class name.
        shape: One image's output shape, as the module produces it.
        layout: What the layout decision was (``nchw``, ``nhwc``, ``tokens``, ``windows``,
            ``vector``).
        note: What was dropped or reshaped, from the layout decision.
        channels: Channels ``C`` of the maps.
        height: Rows ``H`` of the map grid.
        width: Columns ``W`` of it.
        mode: ``nchw``: the output is ``(B, C, H*W)`` as it is; ``nhwc``: ``(B, H*W, C)``;
            ``gather``: take ``index`` from each flattened image.
        index: For ``gather``, ``(C*H*W,)`` positions in one flattened image.
        receptive: The receptive field of each map cell.
        window: ``(rows, columns)`` of the heat-map windows kept per entry.
        first_rows: ``(H,)`` the window's first row for a maximum in each row.
        first_columns: ``(W,)`` likewise for columns.
    """

    key: str
    module: str
    module_type: str
    shape: tuple[int, ...]
    layout: str
    note: str | None
    channels: int
    height: int
    width: int
    mode: Mode
    receptive: ReceptiveField
    index: npt.NDArray[np.int64] | None = None
    window: tuple[int, int] = (1, 1)
    first_rows: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(1, np.int32))
    first_columns: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(1, np.int32))

    @property
    def judges_dead(self) -> bool:
        """Whether a channel never above zero is called dead: maps yes, vectors (logits,
        pooled features: one signed score per channel) no, by the rule ``stats`` follows."""

        return judges_dead(self.height * self.width)

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts about the layer."""
        return {
            "module": self.module,
            "type": self.module_type,
            "output_shape": list(self.shape),
            "maps": [self.channels, self.height, self.width],
            "layout": self.layout,
            "note": self.note,
            "receptive_field": self.receptive.describe(),
        }


@dataclass
class Planned:
    """What planning found: the plans in capture order, what cannot be ranked, and the
    selected modules that never ran."""

    plans: dict[str, LayerPlan]
    skipped: list[tuple[str, str]]
    never_ran: list[str]

    def shown(self) -> str:
        """The first plans' keys and the first reasons for outputs left out, for a message
        that wanted one plan (``"a, b; c: a mask"``)."""
        found = ", ".join(p.key for p in list(self.plans.values())[:4]) or "none with vectors"
        why = "; ".join(f"{key}: {reason}" for key, reason in self.skipped[:2])
        return f"{found}{'; ' + why if why else ''}"


@dataclass(frozen=True)
class _Layout:
    layout: str
    note: str | None
    maps: tuple[int, int, int]
    mode: Mode
    index: npt.NDArray[np.int64] | None


def map_layout(shape: Sequence[int], ctx: LayerContext | None) -> tuple[_Layout | None, str | None]:
    """How one image's output of ``shape`` becomes ``(C, H, W)`` maps, or why it cannot.

    The grids' own decision (:func:`actviz.layouts.to_drawable`) is applied to an array of
    positions, so whatever it drops, reshapes or transposes, the result says which element of
    the output each map cell is. Positions are split in two float32-exact halves, so outputs
    of any size stay exact.
    """

    size = math.prod(shape)
    positions = np.arange(size, dtype=np.int64).reshape(tuple(shape))
    high = to_drawable((positions >> 12).astype(np.float32), ctx)
    if high.kind == "none" or high.array is None:
        return None, high.note or f"cannot read an output of shape {tuple(shape)} as maps"
    low = to_drawable((positions & 4095).astype(np.float32), ctx)
    assert low.array is not None
    index = (high.array.astype(np.int64) << 12) | low.array.astype(np.int64)
    if index.ndim == 1:
        index = index.reshape(-1, 1, 1)
    channels, height, width = (int(n) for n in index.shape)
    flat = index.reshape(-1)
    maps = (channels, height, width)
    if flat.size == size:
        if np.array_equal(flat, np.arange(size)):
            return _Layout(high.layout, high.note, maps, "nchw", None), None
        channels_last = np.arange(size).reshape(height, width, channels).transpose(2, 0, 1)
        if np.array_equal(index, channels_last):
            return _Layout(high.layout, high.note, maps, "nhwc", None), None
    return _Layout(high.layout, high.note, maps, "gather", flat), None


def as_maps(tensor: torch.Tensor, plan: LayerPlan) -> torch.Tensor:
    """A batch of outputs as ``(B, C, H, W)`` maps (a view where the layout allows)."""
    import torch

    batch = tensor.shape[0]
    c, h, w = plan.channels, plan.height, plan.width
    if plan.mode == "nchw":
        return tensor.reshape(batch, c, h, w)
    if plan.mode == "nhwc":
        return tensor.reshape(batch, h, w, c).permute(0, 3, 1, 2)
    assert plan.index is not None
    index = torch.as_tensor(plan.index, device=tensor.device)
    return tensor.reshape(batch, -1).index_select(1, index).reshape(batch, c, h, w)


def positions(plan: LayerPlan, device: Any) -> torch.Tensor:
    """``(C*H*W,)`` where each map cell sits in one flattened output, in ``(C, H, W)`` order
    (what :func:`as_maps` gathers, for writing maps back)."""
    import torch

    c, h, w = plan.channels, plan.height, plan.width
    if plan.mode == "nchw":
        return torch.arange(c * h * w, device=device)
    if plan.mode == "nhwc":
        return torch.arange(c * h * w, device=device).reshape(h, w, c).permute(2, 0, 1).flatten()
    assert plan.index is not None
    return torch.as_tensor(plan.index, device=device)


class _ProbeRecorder(HookSession):
    """Keep each selected output of one forward, in the graph (cloned, so a later in-place op
    such as ResNet's ``relu(inplace=True)`` after ``bn1`` cannot change what it says)."""

    def __init__(self, model: nn.Module, layers: Sequence[str]) -> None:
        super().__init__(model, layers, eval_mode=True)
        self.outputs: dict[str, tuple[str, str, Any]] = {}
        self.refused: dict[str, str] = {}
        """Capture key -> why its rows are not the images (nothing of it is scored)."""
        self._rows = ImageRows(model)

    def _start_record(self) -> None:
        super()._start_record()
        self.outputs = {}
        self.refused = {}

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            for element, raw in activations(output):
                # Windowed attention's rows put back into each image's grid, as scored.
                tensor, why = self._rows.split(name, raw)
                if tensor is None:
                    self.refused[key + element] = why or "its rows are not the images"
                    continue
                kept = tensor.clone() if tensor.requires_grad else tensor.detach()
                self.outputs[key + element] = (name, type(module).__name__, kept)

        self._add_forward_hook(module, hook)


def plan_loaded(
    loaded: LoadedModel, names: Sequence[str], *, in_chans: int, model_name: str
) -> Planned:
    """:func:`plan_layers` on a loaded model: its module, its layers' contexts at its input
    size, on its device."""
    return plan_layers(
        loaded.module,
        names,
        layer_contexts(loaded.module, loaded.input_size),
        input_size=loaded.input_size,
        in_chans=in_chans,
        device=loaded.device,
        model_name=model_name,
    )


def plan_layers(
    module: nn.Module,
    names: Sequence[str],
    contexts: Mapping[str, LayerContext],
    *,
    input_size: tuple[int, int],
    in_chans: int,
    device: torch.device,
    model_name: str,
) -> Planned:
    """Run the probe batch and plan every selected output.

    Raises:
        ModelError: If the model fails on the probe input.
    """
    import torch

    generator = torch.Generator().manual_seed(_PROBE_SEED)
    x = torch.randn((PROBES, in_chans, *input_size), generator=generator).to(device)
    x.requires_grad_(True)
    recorder = _ProbeRecorder(module, names)
    with recorder, torch.enable_grad():
        try:
            module(x)
        except Exception as exc:  # the model's own code: any type, one line
            raise ModelError(
                f"{model_name} failed on a probe input of shape {tuple(x.shape)}: "
                f"{type(exc).__name__}: {first_line(exc)}; check --input-size and --in-chans"
            ) from exc
        never_ran = recorder.never_called()
        outputs = recorder.outputs
        layouts: dict[str, tuple[str, str, tuple[int, ...], _Layout]] = {}
        skipped: list[tuple[str, str]] = list(recorder.refused.items())
        for key, (name, module_type, tensor) in outputs.items():
            if not tensor.is_floating_point():
                dtype = str(tensor.dtype).removeprefix("torch.")
                skipped.append((key, f"{dtype} output holds indices or a mask, not activations"))
                continue
            shape = tuple(int(n) for n in tensor.shape[1:])
            layout, why = map_layout(shape, contexts.get(name))
            if layout is None:
                skipped.append((key, why or "cannot be read as maps"))
                continue
            layouts[key] = (name, module_type, shape, layout)
        plans = {key: _partial_plan(key, *value, input_size) for key, value in layouts.items()}
        maps = {key: as_maps(outputs[key][2], plan) for key, plan in plans.items()}
        fields = measure_fields(maps, x)
    return Planned(
        plans={key: _with_field(plan, fields[key]) for key, plan in plans.items()},
        skipped=skipped,
        never_ran=never_ran,
    )


def output_plan(
    key: str,
    module: str,
    module_type: str,
    shape: Sequence[int],
    ctx: LayerContext | None,
    input_size: tuple[int, int],
) -> tuple[LayerPlan | None, str | None]:
    """The plan of one output of ``shape`` (one image's), read as :func:`plan_layers` reads
    it but without a probe batch: its receptive field is the whole input. None, and why,
    for an output that cannot be read as maps."""
    layout, why = map_layout(shape, ctx)
    if layout is None:
        return None, why or "cannot be read as maps"
    shape = tuple(int(n) for n in shape)
    return _partial_plan(key, module, module_type, shape, layout, input_size), None


def _partial_plan(
    key: str,
    module: str,
    module_type: str,
    shape: tuple[int, ...],
    layout: _Layout,
    input_size: tuple[int, int],
) -> LayerPlan:
    c, h, w = layout.maps
    return LayerPlan(
        key=key,
        module=module,
        module_type=module_type,
        shape=shape,
        layout=layout.layout,
        note=layout.note,
        channels=c,
        height=h,
        width=w,
        mode=layout.mode,
        index=layout.index,
        receptive=ReceptiveField.whole(input_size, (h, w), None),
    )


def _with_field(plan: LayerPlan, measured: ReceptiveField) -> LayerPlan:
    rows, columns, first_rows, first_columns = measured.windows()
    return dataclasses.replace(
        plan,
        receptive=measured,
        window=(rows, columns),
        first_rows=first_rows,
        first_columns=first_columns,
    )
