"""Models: torchvision's registry, and building a model with the requested weights.

:func:`load_model` turns a model name (or the user's own factory) and ``--weights`` into a
model in eval mode on its device, with pretrained weights, a checkpoint, or a seeded random
initialization, and returns it with its preprocessing and class names. It builds on its
siblings: ``pretrained`` (torchvision's weights, their cache and download), ``checkpoints``
(reading checkpoint files safely and fitting them to a model), ``preprocessing`` and ``devices``.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import math
import urllib.error
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.errors import (
    ModelError,
    UnknownModelError,
    UnknownWeightsError,
    UsageError,
    WeightsError,
    first_line,
)
from actviz.models.checkpoints import (
    _checkpoint_classes,
    _load_state_dict,
    load_checkpoint,
)
from actviz.models.devices import resolve_device

# The ``name as name`` imports mark re-exports for mypy --strict: other modules import them here.
from actviz.models.preprocessing import IMAGENET_MEAN as IMAGENET_MEAN
from actviz.models.preprocessing import IMAGENET_STD as IMAGENET_STD
from actviz.models.preprocessing import Preprocessing
from actviz.models.pretrained import (
    _CHECKPOINT_SUFFIXES,
    _default_enum,
    _enum_label,
    _fetch_pretrained,
    _looks_like_checkpoint_path,
    _looks_like_enum_name,
    _pick_enum,
    _valid_weight_names,
)
from actviz.models.pretrained import _weights_enum as _weights_enum
from actviz.models.segmentation import class_channel_names, segmentation_logits

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torchvision.models import WeightsEnum

    from actviz.options import LoadOptions

__all__ = [
    "LoadedModel",
    "ModelEntry",
    "WeightsInfo",
    "architecture_kwargs",
    "build_architecture",
    "list_model_names",
    "list_models",
    "load_model",
    "load_with",
]

#: Families whose input and output contracts differ from "an image batch in, a tensor out".
_UNSUPPORTED_FAMILIES = {
    "detection": "detection",
    "video": "video",
    "optical_flow": "optical-flow",
    "quantization": "quantized",
}
#: The families ``run`` takes: an image batch in, class scores or class maps out.
_RUNNABLE_FAMILIES = frozenset({"classification", "segmentation"})
#: Seed for random initialization (recorded in the manifest).
RANDOM_SEED = 0


@dataclass(frozen=True)
class WeightsInfo:
    """Which weights the model carries, and why.

    Attributes:
        spec: What was asked for (``auto``, ``default``, ``none``, an enum name or a path).
        source: ``pretrained``, ``checkpoint``, ``random``, or ``factory`` (the user's own
            model as its factory built it).
        name: The torchvision weights name (``ResNet34_Weights.IMAGENET1K_V1``) or the
            checkpoint path; None for random weights.
        random: True when the model runs with random initialization.
        reason: Why random weights are used, when ``spec`` did not ask for them.
    """

    spec: str
    source: Literal["pretrained", "checkpoint", "random", "factory"]
    name: str | None = None
    reason: str | None = None

    @property
    def random(self) -> bool:
        """True when the model runs with random initialization."""
        return self.source == "random"


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


@dataclass(frozen=True)
class ModelEntry:
    """One torchvision model name, its family, and whether ``run`` takes it.

    Attributes:
        name: The registry name (``resnet50``).
        family: ``classification``, ``segmentation``, ``detection``, ``video``,
            ``optical-flow`` or ``quantized``.
        runnable: True when :func:`load_model` (and so ``run``, ``stats`` and
            ``list-layers``) takes it: image classification and segmentation models.
    """

    name: str
    family: str
    runnable: bool


def list_models(pattern: str | None = None, *, include_all: bool = False) -> list[ModelEntry]:
    """torchvision's models with their family and whether ``run`` takes them.

    Args:
        pattern: A glob such as ``resnet*``; a pattern without wildcards matches as a
            substring.
        include_all: Also list detection, video, optical-flow and quantized models, which
            ``run`` does not take. Without it, the classification and segmentation models.

    Returns:
        Entries sorted by name.
    """
    from torchvision import models

    families = dict.fromkeys(models.list_models(module=models), "classification")
    families.update(
        (name, "segmentation") for name in models.list_models(module=models.segmentation)
    )
    if include_all:
        for module, label in _UNSUPPORTED_FAMILIES.items():
            families.update(
                (name, label) for name in models.list_models(module=getattr(models, module))
            )
        for name in models.list_models():  # a family torchvision adds later: not runnable
            families.setdefault(name, "other")
    names = sorted(families)
    if pattern:
        glob = pattern if set("*?[") & set(pattern) else f"*{pattern}*"
        names = [n for n in names if fnmatch.fnmatch(n, glob)]
    return [ModelEntry(n, families[n], families[n] in _RUNNABLE_FAMILIES) for n in names]


def list_model_names(pattern: str | None = None, *, include_all: bool = False) -> list[str]:
    """torchvision model names, optionally filtered by a glob: the names of
    :func:`list_models`.

    Args:
        pattern: A glob such as ``resnet*``; a pattern without wildcards matches as a
            substring.
        include_all: Also list detection, video, optical-flow and quantized models, which
            ``run`` does not take. Without it, the classification and segmentation models.

    Returns:
        Sorted model names.
    """
    return [entry.name for entry in list_models(pattern, include_all=include_all)]


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
        name: A torchvision model name (``actviz models`` lists them), or the user's own
            model as ``package.module:factory`` or ``path/to/file.py:factory`` (this imports
            and runs that code).
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
        UnknownModelError: If the name is not in torchvision's registry.
        WeightsError: If required weights are unknown or unavailable.
        CheckpointError: If a checkpoint is unreadable, unsafe or does not fit.
        DeviceError: If the device is not available.
    """

    from actviz.models.factories import (
        build_user_model,
        factory_module_importable,
        is_factory_spec,
    )

    torch_device = resolve_device(device)
    if in_chans not in (1, 3):
        raise UsageError(f"--in-chans must be 1 or 3, not {in_chans}")
    spec = weights.strip()
    if is_factory_spec(name):
        module = _seeded(lambda: build_user_model(name))
        info = WeightsInfo(spec=spec, source="factory", name=name)
        if spec.lower() not in ("auto", "none"):
            path = _existing_checkpoint(spec, name, None, factory=True)
            # A full pickle names the factory's classes by the module's own name.
            with factory_module_importable(name):
                state = load_checkpoint(path, trust=trust_checkpoint)
            _load_state_dict(module, state, name=name, source=str(path))
            info = WeightsInfo(spec=spec, source="checkpoint", name=str(path))
        transforms_from = None
    else:
        module, info, transforms_from = _torchvision_model(name, spec, trust_checkpoint)
    module.eval()
    module.to(torch_device)

    preprocess = Preprocessing.for_weights(
        transforms_from, input_size=input_size, in_chans=in_chans
    )
    categories = _categories(transforms_from, module)
    return LoadedModel(
        name=name,
        module=module,
        weights=info,
        preprocess=preprocess,
        input_size=preprocess.crop_size,
        categories=categories,
        device=torch_device,
        channel_names=class_channel_names(module, categories),
        segmentation=segmentation_logits(module),
    )


def load_with(name: str, options: LoadOptions, *, weights: str | None = None) -> LoadedModel:
    """:func:`load_model` with a command's :class:`~actviz.options.LoadOptions`; ``weights``
    overrides the options' (a second model to compare)."""
    return load_model(
        name,
        weights=options.weights if weights is None else weights,
        device=options.device,
        trust_checkpoint=options.trust_checkpoint,
        input_size=options.input_size,
        in_chans=options.in_chans,
    )


def _torchvision_model(
    name: str, spec: str, trust_checkpoint: bool
) -> tuple[nn.Module, WeightsInfo, WeightsEnum | None]:
    check_model_name(name)
    enum_cls = _weights_enum(name)
    lowered = spec.lower()
    chosen: WeightsEnum | None = None
    state_dict: Mapping[str, torch.Tensor] | None = None
    if lowered == "none":
        info = WeightsInfo(spec="none", source="random")
    elif lowered in ("auto", "default") or (
        enum_cls is not None
        and _looks_like_enum_name(spec)
        and not _looks_like_checkpoint_path(spec)
        and not Path(spec).exists()
    ):
        required = lowered != "auto"
        chosen = _pick_enum(name, enum_cls, spec, required=required)
        if chosen is None:  # auto, and the model has no pretrained weights at all
            info = WeightsInfo(
                spec=spec,
                source="random",
                reason=f"torchvision has no pretrained weights for {name}",
            )
        else:
            try:
                state_dict = _fetch_pretrained(chosen)
                info = WeightsInfo(spec=spec, source="pretrained", name=_enum_label(chosen))
            except WeightsError as exc:
                if required:
                    raise
                info = WeightsInfo(spec=spec, source="random", reason=str(exc))
    else:
        path = _existing_checkpoint(spec, name, enum_cls)
        state_dict = load_checkpoint(path, trust=trust_checkpoint)
        info = WeightsInfo(spec=spec, source="checkpoint", name=str(path))

    preset = chosen if chosen is not None else _default_enum(enum_cls)
    kwargs = architecture_kwargs(name, state_dict, preset)
    if info.source == "pretrained" and name in ("inception_v3", "googlenet"):
        # torchvision builds these with transform_input=True whenever it loads their
        # pretrained weights: they were trained on inputs normalized another way.
        kwargs["transform_input"] = True
    module = _seeded(lambda: build_architecture(name, **kwargs))
    if state_dict is not None and info.source == "checkpoint":
        classes = _checkpoint_classes(module, state_dict)
        if classes is not None:
            # A fine-tuned head: build the architecture with the checkpoint's class count.
            kwargs["num_classes"] = classes
            module = _seeded(lambda: build_architecture(name, **kwargs))
    if state_dict is not None:
        _load_state_dict(module, state_dict, name=name, source=info.name or spec)
    return module, info, preset


def build_architecture(name: str, **kwargs: Any) -> nn.Module:
    """Build a torchvision model with random weights, without downloading anything.

    The weights are always actviz's business (pretrained, checkpoint or random), so the
    builder gets ``weights=None``; builders that would fetch a pretrained backbone
    (torchvision's segmentation and detection models do by default) get
    ``weights_backbone=None``. Works under ``torch.device("meta")``.

    Args:
        name: A name from torchvision's registry.
        **kwargs: Passed to the builder (``num_classes``, ``aux_loss``, ...).

    Returns:
        The model as the builder made it (training mode, on the current default device).

    Raises:
        ModelError: If the builder fails, or tries to download a file and cannot.
    """
    import torch
    from torchvision import models

    try:
        builder = models.get_model_builder(name)
        if "weights_backbone" in inspect.signature(builder).parameters:
            kwargs.setdefault("weights_backbone", None)
        # Builders announce their own future default changes (inception_v3's init); that
        # is torchvision's business, not something a user of actviz can act on.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            built: nn.Module = builder(weights=None, **kwargs)
    except (urllib.error.URLError, OSError) as exc:  # a download, though none was asked for
        why = getattr(exc, "reason", None) or first_line(exc)
        hub = Path(torch.hub.get_dir()) / "checkpoints"
        raise ModelError(
            f"cannot build {name}: torchvision tried to download a file for it and failed "
            f"({why}); build {name} once on a connected machine and copy its torch.hub cache "
            f"to {hub}, or pick another model"
        ) from exc
    except Exception as exc:  # a registry builder failing is a model problem, not a bug here
        raise ModelError(f"cannot build {name}: {first_line(exc)}") from exc
    return built


def architecture_kwargs(
    name: str,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    weights: WeightsEnum | None = None,
) -> dict[str, Any]:
    """Builder arguments for the architecture that weights were made for.

    torchvision's builders change the architecture only when they load weights themselves:
    segmentation weights carry an auxiliary head (``aux_loss``), and ViT weights such as
    vit_h_14's default are for a larger input (``image_size``). actviz builds with
    ``weights=None`` and loads the weights itself, so it asks for the same architecture.

    Args:
        name: A name from torchvision's registry.
        state_dict: The weights about to be loaded (pretrained or a checkpoint), if any.
        weights: The weights whose preprocessing feeds the model, when there is no
            state_dict (random weights shaped like the defaults).

    Returns:
        Keyword arguments for :func:`build_architecture`; empty for most models.
    """
    from torchvision import models

    builder = models.get_model_builder(name)
    kwargs: dict[str, Any] = {}
    params = inspect.signature(builder).parameters
    if (
        state_dict is not None
        and "aux_loss" in params
        and any(k.startswith("aux_classifier.") for k in state_dict)
    ):
        kwargs["aux_loss"] = True
    if builder.__module__.endswith(".vision_transformer"):
        size = _vit_image_size(state_dict, weights)
        if size is not None and size != 224:
            kwargs["image_size"] = size
    return kwargs


def _vit_image_size(
    state_dict: Mapping[str, torch.Tensor] | None, weights: WeightsEnum | None
) -> int | None:
    if state_dict is not None:
        # The position embedding has one row per patch plus the class token.
        pos, proj = state_dict.get("encoder.pos_embedding"), state_dict.get("conv_proj.weight")
        if pos is None or proj is None or pos.ndim != 3 or proj.ndim != 4:
            return None
        side = math.isqrt(int(pos.shape[1]) - 1)
        return side * int(proj.shape[-1]) if side * side == pos.shape[1] - 1 else None
    min_size = weights.meta.get("min_size") if weights is not None else None
    if isinstance(min_size, tuple) and min_size and isinstance(min_size[0], int):
        return min_size[0]
    return None


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """Build with a fixed seed: random weights are then reproducible, the same command draws
    the same pictures, and --resume continues with the very same network."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_SEED)
        return build()


def _existing_checkpoint(
    spec: str, name: str, enum_cls: type[WeightsEnum] | None, *, factory: bool = False
) -> Path:
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    names = "auto or none" if factory else f"auto, default, none, {_valid_weight_names(enum_cls)}"
    names = names.rstrip(", ")
    if path.is_dir():
        raise WeightsError(f"checkpoint {spec} is a folder, not a file; give the file inside it")
    if _looks_like_checkpoint_path(spec):
        raise WeightsError(
            f"checkpoint file not found: {spec}; check the path, or use {names} instead of a file"
        )
    if factory:
        raise UnknownWeightsError(
            f"'{spec}' is not an existing checkpoint file; for your own model use auto, none "
            "or a checkpoint path"
        )
    raise UnknownWeightsError(
        f"'{spec}' is neither a weights name of {name} nor an existing file; "
        f"use {names} or a checkpoint path"
    )


def check_model_name(name: str) -> None:
    """Raise a helpful error unless ``name`` is a torchvision model actviz can run.

    Raises:
        UnknownModelError: With close names, or the family when it is not supported.
    """
    from torchvision import models

    every = models.list_models()
    if name not in every and name.lower().endswith(_CHECKPOINT_SUFFIXES):
        raise UnknownModelError(
            f"{name} is a checkpoint file, not a model; name the architecture as MODEL and "
            f"pass the file with --weights: a model name (`actviz run resnet50 IMAGE "
            f"--weights {name}`; `actviz models` lists them) or your own factory "
            f"(`actviz run net.py:build IMAGE --weights {name}`)"
        )
    if name in every:
        for family, label in _UNSUPPORTED_FAMILIES.items():
            if name in models.list_models(module=getattr(models, family)):
                raise UnknownModelError(
                    f"{name} is a {label} model; actviz runs image classification and "
                    "segmentation models: see `actviz models`"
                )
        return
    close = difflib.get_close_matches(name, every, n=3, cutoff=0.6) or difflib.get_close_matches(
        name.lower().replace("-", "_"), every, n=3, cutoff=0.6
    )
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownModelError(f"unknown model '{name}'{hint} (`actviz models` lists every name)")


def _categories(weights: WeightsEnum | None, module: nn.Module) -> list[str] | None:
    if weights is None:
        return None
    categories = weights.meta.get("categories")
    if not isinstance(categories, list):
        return None
    out_features = _output_classes(module)
    if out_features is not None and out_features != len(categories):
        return None  # a checkpoint with its own head: the labels would lie
    return [str(c) for c in categories]


def _output_classes(module: nn.Module) -> int | None:
    from torch import nn

    logits = segmentation_logits(module)
    if logits is not None:  # the classes are the head's output channels
        convs = [m for m in module.get_submodule(logits).modules() if isinstance(m, nn.Conv2d)]
        return convs[-1].out_channels if convs else None
    last: nn.Linear | None = None
    for child in module.modules():
        if isinstance(child, nn.Linear):
            last = child
    return last.out_features if last is not None else None
