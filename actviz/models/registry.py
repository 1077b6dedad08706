"""Models: building a model by name, from whichever source owns the name, with the requested
weights.

:func:`load_model` turns a model name (or the user's own factory) and ``--weights`` into a
model in eval mode on its device, with pretrained weights, a checkpoint, or a seeded random
initialization, and returns it with its preprocessing and class names. Which source owns a
name, and what each source does, is the table in :mod:`actviz.models.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.models.devices import resolve_device
from actviz.models.families import (
    CLASSIFICATION,
    Family,
    family_named,
    family_of,
    torchvision_family,
)

# The ``name as name`` imports mark re-exports for mypy --strict: other modules import them here.
from actviz.models.preprocessing import IMAGENET_MEAN as IMAGENET_MEAN
from actviz.models.preprocessing import IMAGENET_STD as IMAGENET_STD
from actviz.models.preprocessing import Preprocessing
from actviz.models.segmentation import class_channel_names, segmentation_logits
from actviz.models.sources import ModelEntry, source_for, source_named
from actviz.models.sources.torchvision import architecture_kwargs as architecture_kwargs
from actviz.models.sources.torchvision import build_architecture as build_architecture
from actviz.models.weights import RANDOM_SEED as RANDOM_SEED
from actviz.models.weights import WeightsInfo

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.models.options import LoadOptions

__all__ = [
    "LoadedModel",
    "ModelEntry",
    "WeightsInfo",
    "architecture_kwargs",
    "build_architecture",
    "check_model_name",
    "list_models",
    "load_model",
    "load_with",
    "loaded_model",
]


@dataclass
class LoadedModel:
    """A model ready to run, with what is needed to feed it and read its output."""

    name: str
    module: nn.Module
    weights: WeightsInfo
    preprocess: Preprocessing
    input_size: tuple[int, int]
    categories: list[str] | None
    device: torch.device
    channel_names: dict[str, list[str]] = field(default_factory=dict)
    """Module name -> the class name of each output channel (a segmentation model's heads)."""
    segmentation: str | None = None
    """The module whose output is a segmentation model's class logits (before upsampling)."""
    source: str = "torchvision"
    """The model source that built it (``torchvision``, ``factory``, ...)."""
    versions: dict[str, str] = field(default_factory=dict)
    """The versions of the libraries the model source depends on, for the manifest."""
    classifier: bool = True
    """False for a backbone whose output is features, or a family whose output is not class
    scores (a detector's boxes): no top-k predictions, no Grad-CAM of a class."""
    family: Family = CLASSIFICATION
    """How the model is fed and its output read (:mod:`actviz.models.families`)."""

    def record(self) -> dict[str, Any]:
        """The model as a manifest records it: its source, name, the source's library
        versions, and the preprocessing actually used with where it came from."""
        return {
            "source": self.source,
            "name": self.name,
            "versions": dict(self.versions),
            "preprocessing": self.preprocess.record(),
            "family": self.family.key,
        }


def list_models(
    pattern: str | None = None,
    *,
    include_all: bool = False,
    source: str = "torchvision",
    family: str | None = None,
) -> list[ModelEntry]:
    """A source's models with their family and whether ``run`` takes them.

    Args:
        pattern: A glob such as ``resnet*``; a pattern without wildcards matches as a
            substring.
        include_all: Also list what a source lists only on request: timm's pretrained
            tags, and the models of any family ``run`` does not take (see
            :attr:`actviz.models.families.Family.refused`).
        source: The model source to list (see :data:`actviz.models.sources.SOURCES`).
        family: Only the models of this family (``detection``; see
            :data:`actviz.models.families.FAMILIES`).

    Returns:
        Entries sorted by name.

    Raises:
        UsageError: If ``source`` names no source or ``family`` no family.
    """
    wanted = family_named(family).label if family is not None else None
    entries = source_named(source).list_models(pattern, include_all=include_all)
    return [e for e in entries if wanted is None or e.family == wanted]


def check_model_name(name: str) -> None:
    """Raise a helpful error unless the source that owns ``name`` can load it.

    Raises:
        UnknownModelError: With close names, or the family when it is not supported.
    """
    source_for(name).check_name(name)


def load_model(
    name: str,
    *,
    weights: str = "auto",
    device: str = "auto",
    trust_checkpoint: bool = False,
    input_size: tuple[int, int] | None = None,
    in_chans: int = 3,
) -> LoadedModel:
    """Build a model with the requested weights, in eval mode, on the device.

    Args:
        name: A torchvision model name (``actviz models`` lists them), ``timm/NAME``,
            ``hf:FOLDER_OR_ID`` (a save_pretrained folder or a cached Hub id), or the user's
            own model as ``package.module:factory`` or ``path/to/file.py:factory`` (this
            imports and runs that code).
        weights: ``auto`` (pretrained when cached or downloadable, else random with a reason),
            ``default`` or an enum name (required), ``none`` (random), or a checkpoint path.
            For the user's own model, ``auto`` and ``none`` keep what the factory built.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        trust_checkpoint: Allow a checkpoint that needs full unpickling (runs code from it).
        input_size: ``(height, width)`` the model takes; default: the weights' crop size
            (224 x 224 for most).
        in_chans: 3 for RGB input, 1 for greyscale.

    Returns:
        The model with its preprocessing, categories and weights record.

    Raises:
        UnknownModelError: If the name is not in its source's registry.
        WeightsError: If required weights are unknown or unavailable.
        CheckpointError: If a checkpoint is unreadable, unsafe or does not fit.
        DeviceError: If the device is not available.
    """
    if in_chans not in (1, 3):
        raise UsageError(f"--in-chans must be 1 or 3, not {in_chans}")
    source = source_for(name)
    named = torchvision_family(name) if source.key == "torchvision" else None
    if named is not None and named.cpu_only is not None:
        # Before the device is looked for: a usage error whatever this machine has.
        family_device(name, named, _cpu(), device, cpu=device.strip().lower() == "cpu")
    torch_device = resolve_device(device)
    built = source.load(
        name, weights.strip(), trust_checkpoint=trust_checkpoint, input_size=input_size
    )
    return loaded_model(
        name,
        built.module,
        built.weights,
        device=torch_device,
        asked=device,
        preprocess=source.preprocessing(
            name, built.preset, input_size=input_size, in_chans=in_chans
        ),
        categories=source.class_names(built.module, built.preset),
        source=source.key,
        versions=source.versions(),
        classifier=built.classifier,
    )


def loaded_model(
    name: str,
    module: nn.Module,
    weights: WeightsInfo,
    *,
    device: torch.device,
    asked: str,
    preprocess: Preprocessing,
    categories: list[str] | None,
    source: str,
    versions: dict[str, str] | None = None,
    classifier: bool = True,
) -> LoadedModel:
    """A built module made ready to run, the one way every :class:`LoadedModel` is assembled
    (a name its source built, or a module object a caller holds).

    The module's family is found (a family actviz does not run is refused), the module put in
    eval mode on the family's device, the family's preprocessing laid over ``preprocess``, and
    what its output says of itself read: each output channel's class name, where a
    segmentation model's class logits are.

    Args:
        name: How the model is named (its name, or a module object's class name).
        module: The built module, with its weights.
        weights: Which weights it carries.
        device: The resolved device; ``asked``: the device option as given (``auto``), which
            decides whether a CPU-only family moves to the CPU or refuses.
        preprocess: The source's preprocessing for it, before the family's.
        categories: The class names of its scores (None: unknown).
        source: The key of the model source that built it (``module`` for an object).
        versions: The source's library versions, for the record.
        classifier: Whether the source says its output is class scores (the family also
            must).

    Raises:
        UsageError: For a family actviz does not run, or a CPU-only family sent elsewhere.
    """
    family = family_of(module)
    if family.refused is not None:
        raise UsageError(f"{name}: {family.refused}")
    placed = family_device(name, family, device, asked)
    module.eval()
    module.to(placed)
    preprocess = family.preprocessing(preprocess, module)
    return LoadedModel(
        name=name,
        module=module,
        weights=weights,
        preprocess=preprocess,
        input_size=preprocess.crop_size,
        categories=categories,
        device=placed,
        channel_names=class_channel_names(module, categories),
        segmentation=segmentation_logits(module),
        source=source,
        versions=dict(versions or {}),
        classifier=classifier and family.classifies,
        family=family,
    )


def family_device(
    name: str, family: Family, device: torch.device, asked: str, *, cpu: bool | None = None
) -> torch.device:
    """The device a model of ``family`` runs on: ``device``, or the CPU for a CPU-only family
    when the device was left to ``auto`` (``cpu``: whether ``asked`` is the CPU, when
    ``device`` is not resolved yet).

    Raises:
        UsageError: If a CPU-only family's model was sent to another device.
    """
    on_cpu = device.type == "cpu" if cpu is None else cpu
    if family.cpu_only is None or on_cpu:
        return device
    if asked.strip().lower() == "auto":
        return _cpu()
    raise UsageError(f"{name} cannot run on {asked.strip()}: {family.cpu_only}")


def _cpu() -> torch.device:
    import torch

    return torch.device("cpu")


def load_with(name: str, options: LoadOptions, *, weights: str | None = None) -> LoadedModel:
    """:func:`load_model` with a command's :class:`~actviz.models.options.LoadOptions`; ``weights``
    overrides the options' (a second model to compare)."""
    return load_model(
        name,
        weights=options.weights if weights is None else weights,
        device=options.device,
        trust_checkpoint=options.trust_checkpoint,
        input_size=options.input_size,
        in_chans=options.in_chans,
    )
