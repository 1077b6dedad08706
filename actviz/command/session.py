"""The model a command opens (:mod:`actviz.command.opening` puts it to use): a name its source
builds, or an ``nn.Module`` object (notebook users hold one) used with the weights it carries,
ImageNet's preprocessing unless ``preprocess`` is given, and no class names; given back as it
came (:func:`restoring`). And the weights and versions records every command's JSON file holds.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import PIL

from actviz.errors import UsageError
from actviz.hooks.refs import check_hookable
from actviz.models import Preprocessing, WeightsInfo, load_checkpoint, load_with, resolve_device
from actviz.models.checkpoints import load_state_dict_into
from actviz.models.families import run_settings_kept
from actviz.models.registry import loaded_model
from actviz.models.weights import RANDOM_SEED, existing_checkpoint

if TYPE_CHECKING:
    from torch import nn

    from actviz.models import LoadedModel, WeightsInfo
    from actviz.models.options import LoadOptions

__all__ = [
    "RANDOM_NOTE",
    "model_label",
    "open_model",
    "restoring",
    "versions_record",
    "weights_record",
]

RANDOM_NOTE = "random weights: an untrained model, so no learned features"
"""The header line of every picture drawn from a model whose weights are random."""


def model_label(model: str | nn.Module) -> str:
    """How a model is named in messages, files and records: its name, or its class name."""
    if isinstance(model, str):
        return model
    return type(model).__name__


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


def hookable_module(model: object, in_chans: int, *, takes: str, chans: str) -> str:
    """The label of a module object actviz can hook, checked with its input channels.

    Raises:
        UsageError: For something else than a module (``takes``: what the message says takes
            it), or ``in_chans`` other than 1 or 3 (``chans``: the option's name).
        ModelError: For a scripted or compiled module, where hooks may not fire.
    """
    from torch import nn

    if not isinstance(model, nn.Module):
        raise UsageError(
            f"{takes} a model name (e.g. 'resnet18', 'path/to/file.py:factory') or a "
            f"torch.nn.Module, not {type(model).__name__}"
        )
    label = model_label(model)
    check_hookable(model, label)
    if in_chans not in (1, 3):
        raise UsageError(f"{chans} must be 1 or 3, not {in_chans}")
    return label


def _from_module(model: object, options: LoadOptions, weights: str) -> LoadedModel:
    """A module object as a loaded model, with ImageNet's preprocessing (as a factory's)."""

    from torch import nn

    label = hookable_module(model, options.in_chans, takes="model must be", chans="--in-chans")
    assert isinstance(model, nn.Module)
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
    return loaded_model(
        label,
        module,
        info,
        device=device,
        asked=options.device,
        preprocess=Preprocessing.fitted(input_size=options.input_size, in_chans=options.in_chans),
        categories=None,
        source="module",
    )


@contextlib.contextmanager
def restoring(model: Any) -> Iterator[None]:
    """Give a module object back as it came: training mode, device and the settings a run
    changes (a detector's score cut, a flow model's iterations), whatever happened.

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
    settings = run_settings_kept(model)
    try:
        yield
    finally:
        settings()
        for module, training in modes.items():
            module.training = training
        if device is not None:
            model.to(device)


def weights_record(weights: WeightsInfo, warning: str | None = None) -> dict[str, Any]:
    """Which weights the model carried, as every command's JSON file records them: the seed
    of random weights and of the user's own factory (which builds under the same seed), and
    the warning given about random weights, if one was."""

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
    import torch
    import torchvision

    return {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        **(extra or {}),
    }
