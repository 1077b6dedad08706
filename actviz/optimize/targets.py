"""What ``optimize`` maximizes, decided and checked before anything is written: the layers
(or the model's output), what their channels are (channels, class logits, or the output
dimensions of a model that gives features), and that every channel asked for exists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.errors import UsageError
from actviz.layouts import layer_contexts
from actviz.optimize.objective import channel_axis, check_channels, positions
from actviz.optimize.probe import probe, reads_classes

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.layouts import LayerContext
    from actviz.models import LoadedModel
    from actviz.optimize.options import OptimizeOptions

__all__ = ["LOGITS", "OUTPUT", "Targets", "channel_count", "plan_targets"]

#: The pseudo-layer name of the model's output when it is class logits.
LOGITS = "logits"
#: ... and when it is not (a backbone's features, an embedding).
OUTPUT = "output"


@dataclass(frozen=True)
class Targets:
    """The layers of one optimize run.

    Attributes:
        modules: Layer key -> module name (None for the model's output), in the model's order.
        objective: ``channel``, ``neuron``, ``logit`` (a classifier's output) or ``output``
            (the output of a model that gives features, not class scores).
        contexts: What the model's structure says about each module (``""``: the model).
        model_size: The one input size the model takes (patch grids, windows), else None.
    """

    modules: dict[str, str | None]
    objective: str
    contexts: dict[str, LayerContext]
    model_size: tuple[int, int] | None


def channel_count(shape: tuple[int, ...], ctx: LayerContext | None) -> int:
    """How many channels an output of this shape (one image, batch dimension included) has,
    read as the objective reads it."""
    grid = positions(shape[1:], ctx)
    return int(grid.shape[0]) if grid is not None else shape[channel_axis(shape, ctx)]


def plan_targets(cmd: Command, loaded: LoadedModel, opts: OptimizeOptions) -> Targets:
    """The layers to optimize, checked on one forward of a grey image.

    Raises:
        UsageError: If no layer is selected, a channel (or class) is beyond its output, or
            a layer's first dimension is not the batch.
        ModelError: If a layer does not run.
    """
    import torch

    contexts = layer_contexts(loaded.module, loaded.input_size)
    # Patch grids and attention windows hold for one input size only.
    fixed = any(c.token_grid is not None or c.windows is not None for c in contexts.values())
    model_size = loaded.input_size if fixed else None
    names: list[str] = []
    if opts.objective is None:
        _, names = cmd.deepest(loaded, opts.layers)
        if not names:
            raise UsageError(f"no layer selected; see actviz list-layers {cmd.model}")
    side = model_size or (opts.size, opts.size)
    x = torch.zeros((1, loaded.preprocess.channels, *side), device=loaded.device)
    probed = probe(loaded.module, names, x)
    channels = opts.channel_list()
    if opts.objective is not None:
        logits = reads_classes(loaded, probed.head)
        shape = probed.shapes[None]
        _check_batch(shape, "the model's output")
        count = channel_count(shape, contexts.get(""))
        unit = "classes" if logits else "output dimensions (it gives features, not classes)"
        check_channels(channels, count, "the model's output", flag="--objective", unit=unit)
        key = LOGITS if logits else OUTPUT
        return Targets({key: None}, "logit" if logits else "output", contexts, model_size)
    for name in names:
        shape = probed.shapes[name]
        _check_batch(shape, f"layer {name}")
        count = channel_count(shape, contexts.get(name))
        check_channels(channels, count, f"layer {name}", flag="--channels", unit="channels")
    objective = "neuron" if opts.neuron else "channel"
    return Targets({name: name for name in names}, objective, contexts, model_size)


def _check_batch(shape: tuple[int, ...], where: str) -> None:
    if len(shape) < 2 or shape[0] != 1:
        raise UsageError(
            f"{where} gives {shape[0] if shape else 0} rows for one image (its first "
            "dimension is not the batch, as in windowed attention); choose another layer"
        )
