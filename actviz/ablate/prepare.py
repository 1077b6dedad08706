"""Before any image is read: the layer, the labels, the model cut at the layer and checked on
a probe batch, the layer's layout, what is removed and how, the ablations, and whether the
linear-readout shortcut applies. Every usage error is found here, before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.ablate.engine import Engine
from actviz.ablate.labels import Labels, read_labels, unique_names
from actviz.ablate.modes import Mode
from actviz.ablate.options import AblateOptions
from actviz.ablate.readout import linear_readout, pooled
from actviz.ablate.split import split_model
from actviz.ablate.targets import (
    Coordinates,
    Direction,
    Features,
    LayerGeometry,
    Units,
    load_direction,
)
from actviz.command.opening import one_layer
from actviz.errors import UsageError
from actviz.hooks import eval_mode
from actviz.layouts import layer_contexts
from actviz.top_images.features import dictionary_layer
from actviz.top_images.plan import output_plan

if TYPE_CHECKING:
    import torch

    from actviz.ablate.readout import Readout
    from actviz.ablate.split import Split
    from actviz.command import Command
    from actviz.models import LoadedModel

__all__ = ["Ablations", "State", "prepare"]

#: The probe batch's images (two, so that a value the cut hands on that is not one row per
#: image shows when stacked).
PROBE = 2
_PROBE_SEED = 0


@dataclass(frozen=True)
class Ablations:
    """The ablations of a command: each one's name and the coordinates it changes.

    Attributes:
        names: ``unit 17``, ``units 0-63``, ``direction``, ``feature 5``.
        masks: ``(K, J)`` bool: which coordinates each changes.
        each: One coordinate each (a sweep).
    """

    names: list[str]
    masks: torch.Tensor
    each: bool

    @property
    def count(self) -> int:
        return len(self.names)


@dataclass
class State:
    """What every pass over the folder needs."""

    opts: AblateOptions
    loaded: LoadedModel
    layer: str
    geometry: LayerGeometry
    coords: Coordinates
    mode: Mode
    split: Split
    engine: Engine
    labels: Labels
    ablations: Ablations
    classes: int
    """The model's number of classes (its logits' width)."""
    rels: dict[str, str] = field(default_factory=dict)
    """Image path -> its name in the outputs (relative to its folder)."""
    references: Any = None
    """What the mode took from the folder (:class:`~actviz.ablate.passes.References`)."""

    @property
    def readout(self) -> Readout | None:
        return self.engine.readout

    def class_name(self, index: int) -> str:
        names = self.loaded.categories
        if index in self.labels.names:
            return self.labels.names[index]
        return names[index] if names and 0 <= index < len(names) else f"class {index}"


def _layer(cmd: Command, loaded: LoadedModel, selector: str) -> str:
    _, names = cmd.select(loaded, selector)
    return one_layer(names, selector, doing="ablate edits one layer", option="--layer")


def _probe(loaded: LoadedModel, opts: AblateOptions) -> torch.Tensor:
    import torch

    generator = torch.Generator().manual_seed(_PROBE_SEED)
    x = torch.randn((PROBE, opts.load.in_chans, *loaded.input_size), generator=generator)
    x = x.to(loaded.device)
    if opts.execution.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _geometry(loaded: LoadedModel, layer: str, shape: tuple[int, ...]) -> LayerGeometry:

    module_type = type(loaded.module.get_submodule(layer)).__name__
    ctx = layer_contexts(loaded.module, loaded.input_size).get(layer)
    plan, why = output_plan(layer, layer, module_type, shape, ctx, loaded.input_size)
    if plan is None:
        raise UsageError(
            f"{layer}'s output {shape} cannot be read as channels ({why}); pick a "
            "convolution, stage or encoder block (actviz list-layers)"
        )
    if plan.mode == "nchw":
        axis = 1
    elif plan.mode == "nhwc" or (plan.layout == "tokens" and len(shape) == 2):
        axis = len(shape)
    else:
        raise UsageError(
            f"{layer}'s output is laid out as {plan.layout} ({plan.note}); ablate edits "
            "channels of maps, tokens or vectors: pick another layer"
        )
    return LayerGeometry(layer, shape, axis, plan)


def _coordinates(
    cmd: Command, loaded: LoadedModel, opts: AblateOptions, geometry: LayerGeometry
) -> Coordinates:
    if opts.units is not None:
        return Units(opts.indices(), geometry)
    if opts.direction is not None:
        vector = load_direction(Path(opts.direction), geometry.channels, geometry.name)
        return Direction(vector, geometry, Path(opts.direction))
    assert opts.sae is not None

    sae = cmd.dictionary(Path(opts.sae), loaded, loaded.device)
    key, module = dictionary_layer(sae)
    if module != geometry.name:
        raise UsageError(
            f"--sae {opts.sae} was trained on {key}, not {geometry.name}: its features are "
            f"directions in that layer's activations; use --layer {module}"
        )
    if sae.channels != geometry.plan.channels:
        raise UsageError(
            f"--sae {opts.sae} reads vectors of {sae.channels} channels and {geometry.name} "
            f"gives {geometry.plan.channels} here; use the model and --input-size it was "
            "trained with"
        )
    return Features(opts.indices(), sae, geometry)


def _ablations(coords: Coordinates, each: bool) -> Ablations:
    import torch

    count = coords.count
    if each:
        singular = {"units": "unit", "features": "feature"}[coords.kind]
        names = [f"{singular} {label}" for label in coords.labels]
        return Ablations(names, torch.eye(count, dtype=torch.bool), True)
    if coords.kind == "direction":
        name = "direction"
    else:
        values = [int(v) for v in coords.labels]
        noun = coords.kind if count > 1 else coords.kind[:-1]
        name = f"{noun} {compact(values)}"
    return Ablations([name], torch.ones(1, count, dtype=torch.bool), False)


def compact(values: list[int]) -> str:
    """``0-63,70``: sorted integers with runs as ranges."""
    parts: list[str] = []
    start = prev = None
    for v in sorted(values):
        if start is None:
            start = prev = v
        elif v == prev + 1:  # type: ignore[operator]
            prev = v
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = v
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def _rows(loaded: LoadedModel, batch: int) -> int:
    """Images per call of the rest of the model: 64 on a CPU (at least a batch), 512 on an
    accelerator."""
    return max(batch, 64 if loaded.device.type == "cpu" else 512)


def prepare(cmd: Command, loaded: LoadedModel, opts: AblateOptions) -> State:
    """Everything the passes need, every usage error raised before any image is read.

    Raises:
        UsageError: For a layer that is not one module that runs once with one tensor out,
            units outside it, a dictionary or direction that does not fit it, or labels
            that do not fit the model.
    """
    import torch

    assert opts.layer is not None and cmd.found is not None
    layer = _layer(cmd, loaded, opts.layer)
    labels = read_labels(
        cmd.found.images, opts.labels, categories=loaded.categories, model=cmd.model
    )
    x = _probe(loaded, opts)
    with eval_mode(loaded.module):
        split = split_model(loaded.module, layer, x, loaded.family.call, model_name=cmd.model)
        with torch.inference_mode():
            a, others = split.prefix(x)
            logits = split.suffix(a, others, 1)
    if split.fallback is not None:
        cmd.warn(f"{split.fallback}; every ablation runs the whole model")
    classes = int(logits.shape[1])
    beyond = [i for i in labels.of.values() if i >= classes]
    if beyond:
        raise UsageError(
            f"the labels name class {max(beyond)} and {cmd.model} gives {classes} scores; "
            "label with the model's own classes, or --labels none"
        )
    geometry = _geometry(loaded, layer, tuple(int(n) for n in a.shape[1:]))
    coords = _coordinates(cmd, loaded, opts, geometry)
    readout = None
    if opts.shortcut and split.graph is not None and geometry.pools:
        readout = linear_readout(split.graph)
        if readout is not None:
            with torch.inference_mode():
                try:
                    again = readout.logits(pooled(a))
                    same = again.shape == logits.shape and bool(
                        torch.allclose(again, logits.float(), rtol=1e-4, atol=1e-4)
                    )
                except RuntimeError:
                    same = False
            readout = readout if same else None
    engine = Engine(
        split, coords, opts.parsed_mode(), readout, _rows(loaded, opts.execution.batch_size)
    )
    return State(
        opts=opts,
        loaded=loaded,
        layer=layer,
        geometry=geometry,
        coords=coords,
        mode=opts.parsed_mode(),
        split=split,
        engine=engine,
        labels=labels,
        ablations=_ablations(coords, opts.each),
        classes=classes,
        rels={
            str(item.path): name
            for item, name in zip(cmd.found.images, unique_names(cmd.found.images), strict=True)
        },
    )


def describe_method(state: State) -> dict[str, Any]:
    """How the ablations were run, for the JSON."""
    readout = state.readout
    return {
        "split": state.split.method,
        "fallback": state.split.fallback,
        "stacked": state.split.stacks,
        "shortcut": None
        if readout is None
        else f"linear readout: global average pool -> {readout.linear}; every ablation's "
        "logits from one product",
    }
