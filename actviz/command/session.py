"""The pieces of the opening every command shares (:mod:`actviz.command.opening` puts them
together): find the inputs, load the model (random weights carried as data), select the
layers, put the model in its memory format; and the weights and versions records every
command's JSON file holds.

The model a command is given is a name (built by its source) or an ``nn.Module`` object
(taken as it is), with its preprocessing.

Notebook users hold a model object, not a name: :func:`open_model` takes either. A module is
used with the weights it carries (or a checkpoint loaded into a copy of it), ImageNet's standard
preprocessing unless ``preprocess`` is given, as for the user's own factory, and no class names.
:func:`restoring` gives the module back as it came (training mode, device).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from actviz.errors import ModelError, UsageError

if TYPE_CHECKING:
    from torch import nn

    from actviz.images import Discovery
    from actviz.models import LoadedModel, WeightsInfo
    from actviz.models.options import LoadOptions

__all__ = [
    "RANDOM_NOTE",
    "Loaded",
    "RandomWeights",
    "check_engine",
    "find_inputs",
    "in_memory_format",
    "model_label",
    "open_model",
    "restoring",
    "select",
    "versions_record",
    "warn_if_random",
    "weights_record",
]

RANDOM_NOTE = "random weights: an untrained model, so no learned features"
"""The header line of every picture drawn from a model whose weights are random."""


def model_label(model: str | nn.Module) -> str:
    """How a model is named in messages, files and records: its name, or its class name."""
    if isinstance(model, str):
        return model
    return type(model).__name__


def check_engine(model: str | nn.Module, engine: str) -> None:
    """A usage error for a model object with an engine that rebuilds the model by name.

    Raises:
        UsageError: If ``model`` is not a name and ``engine`` is ``ray``.
    """
    if engine == "ray" and not isinstance(model, str):
        raise UsageError(
            "engine='ray' builds the model again in each worker from its name; pass a "
            "model name or 'path/to/file.py:factory' instead of the model object, or use "
            "engine='local'"
        )


def open_model(
    model: str | nn.Module, options: LoadOptions, *, weights: str | None = None
) -> LoadedModel:
    """The model ready to run, from a name or a module object.

    Args:
        model: A model name its source builds (``resnet18``, ``file.py:factory``), or an
            ``nn.Module``, used as it is (moved to the device, put in eval mode).
        options: How it is loaded; ``options.preprocess`` replaces the model's own
            preprocessing when given.
        weights: Overrides ``options.weights`` (a second model to compare). For a module,
            ``auto`` and ``none`` keep its weights; a checkpoint path is loaded into a copy.

    Raises:
        UsageError: If ``model`` is neither a string nor an ``nn.Module``, or
            ``options.preprocess`` is not a :class:`~actviz.models.Preprocessing`.
        ModelError: For a TorchScript or ``torch.compile`` module (hooks may not fire).
    """
    from actviz.models import Preprocessing, load_with

    preprocess = options.preprocess
    if preprocess is not None and not isinstance(preprocess, Preprocessing):
        raise UsageError(
            f"preprocess must be an actviz.models.Preprocessing, not "
            f"{type(preprocess).__name__}; e.g. Preprocessing.fitted(resize=256, crop=224, "
            "mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))"
        )
    if isinstance(model, str):
        loaded = load_with(model, options, weights=weights)
    else:
        loaded = _from_module(model, options, options.weights if weights is None else weights)
    if preprocess is not None:
        loaded.preprocess = preprocess
        loaded.input_size = preprocess.crop_size
    return loaded


def _from_module(model: object, options: LoadOptions, weights: str) -> LoadedModel:
    """A module object as a loaded model, with ImageNet's preprocessing (as a factory's)."""
    import copy

    import torch
    from torch import nn

    from actviz.models import (
        LoadedModel,
        Preprocessing,
        WeightsInfo,
        class_channel_names,
        load_checkpoint,
        resolve_device,
        segmentation_logits,
    )
    from actviz.models.checkpoints import load_state_dict_into
    from actviz.models.weights import existing_checkpoint

    if not isinstance(model, nn.Module):
        raise UsageError(
            f"model must be a model name (e.g. 'resnet18', 'path/to/file.py:factory') or a "
            f"torch.nn.Module, not {type(model).__name__}"
        )
    label = model_label(model)
    if isinstance(model, torch.jit.ScriptModule):
        raise ModelError(
            f"{label} is a TorchScript module, whose forward hooks do not fire reliably; "
            "pass the eager nn.Module instead"
        )
    if hasattr(model, "_orig_mod"):
        raise ModelError(
            f"{label} is a torch.compile'd module, which may skip forward hooks; pass the "
            "module before compiling it (its ._orig_mod)"
        )
    if options.in_chans not in (1, 3):
        raise UsageError(f"--in-chans must be 1 or 3, not {options.in_chans}")
    device = resolve_device(options.device)
    spec = weights.strip()
    module: nn.Module = model
    if spec.lower() in ("auto", "none"):
        info = WeightsInfo(spec=spec, source="module", name=label)
    else:
        path = existing_checkpoint(spec, label, "auto or none", factory=True)
        state = load_checkpoint(path, trust=options.trust_checkpoint)
        module = copy.deepcopy(model)  # the caller's model keeps its own weights
        load_state_dict_into(module, state, name=label, source=str(path))
        info = WeightsInfo(spec=spec, source="checkpoint", name=str(path))
    module.eval()
    module.to(device)
    preprocess = Preprocessing.fitted(input_size=options.input_size, in_chans=options.in_chans)
    return LoadedModel(
        name=label,
        module=module,
        weights=info,
        preprocess=preprocess,
        input_size=preprocess.crop_size,
        categories=None,
        device=device,
        channel_names=class_channel_names(module, None),
        segmentation=segmentation_logits(module),
        source="module",
    )


@contextlib.contextmanager
def restoring(model: Any) -> Iterator[None]:
    """Give a module object back as it came: training mode and device, whatever happened.

    A name (or anything that is not a module) is left alone.
    """
    if isinstance(model, str):
        yield
        return
    from torch import nn

    if not isinstance(model, nn.Module):
        yield
        return
    modes = {module: module.training for module in model.modules()}
    tensors = [*model.parameters(), *model.buffers()]
    device = tensors[0].device if tensors else None
    try:
        yield
    finally:
        for module, training in modes.items():
            module.training = training
        if device is not None:
            model.to(device)


class _Warns(Protocol):
    def warn(self, message: str) -> None: ...


def find_inputs(inputs: Sequence[Path | str]) -> Discovery:
    """The images among ``inputs`` (files, and folders walked recursively), and what was
    skipped."""
    from actviz import images

    return images.discover([Path(p) for p in inputs])


@dataclass(frozen=True)
class RandomWeights:
    """A model whose weights came out random without being asked for (``--weights none`` asks).

    Attributes:
        model: The model's name.
        reason: Why its weights are random (no network, no pretrained weights, ...).
        flag: The option that asks for random weights on purpose.
    """

    model: str
    reason: str
    flag: str = "--weights"

    def warning(self, shows: str) -> str:
        """The loud warning, saying what ``shows`` (``"The grids show"``) an untrained model."""
        return (
            f"RANDOM WEIGHTS: {self.reason}. {shows} an untrained {self.model}; "
            f"pass {self.flag} none to say that is what you want."
        )


@dataclass(frozen=True)
class Loaded:
    """A model opened for a command, and its random weights as data (None when it has
    trained weights, or random ones were asked for)."""

    model: LoadedModel
    random: RandomWeights | None
    warning: str | None
    """The warning given about ``random``, as it appears among the command's warnings."""


def warn_if_random(
    loaded: LoadedModel, notify: _Warns, warnings: list[str], *, shows: str, flag: str = "--weights"
) -> Loaded:
    """A loaded model with its random weights as data: when they are random by accident,
    warn once (``shows``: what the command's pictures show, ``"The grids show"``; ``flag``:
    the option that asks for random weights) through ``notify`` and ``warnings``."""
    info = loaded.weights
    if not info.random or info.spec.strip().lower() == "none":
        return Loaded(loaded, None, None)
    random = RandomWeights(loaded.name, info.reason or "no pretrained weights", flag)
    message = random.warning(shows)
    warnings.append(message)
    notify.warn(message)
    return Loaded(loaded, random, message)


def select(
    model: str, loaded: LoadedModel, layers: str | None, *, default: str | None = None
) -> tuple[str, list[str]]:
    """The selector (``layers``, else ``default``, else the architecture's default) and the
    modules it names."""
    from actviz.hooks import layer_refs
    from actviz.layouts import default_selector
    from actviz.selectors import select_layers

    selector = layers if layers is not None else default or default_selector(loaded.module)
    return selector, select_layers(layer_refs(loaded.module), selector, model=model)


def in_memory_format(module: Any, channels_last: bool) -> Any:
    """The module in the memory format the command runs it in."""
    if not channels_last:
        return module
    import torch

    return module.to(memory_format=torch.channels_last)


def weights_record(weights: WeightsInfo, warning: str | None = None) -> dict[str, Any]:
    """Which weights the model carried, as every command's JSON file records them: the seed
    of random weights and of the user's own factory (which builds under the same seed), and
    the warning given about random weights, if one was."""
    from actviz.models.weights import RANDOM_SEED

    seeded = weights.random or weights.source == "factory"
    return {
        "spec": weights.spec,
        "source": weights.source,
        "name": weights.name,
        "random": weights.random,
        "seed": RANDOM_SEED if seeded else None,
        "reason": weights.reason,
        "warning": warning,
    }


def versions_record(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The versions of the libraries that made the pictures; ``extra``: the model source's
    own library (timm, transformers), when it has one."""
    import PIL
    import torch
    import torchvision

    return {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        **(extra or {}),
    }
