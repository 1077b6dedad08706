"""torchvision's registry as a model source: ``resnet50``, ``vit_b_16``, ``fcn_resnet50``...

Names come from torchvision's registry; weights from its weights API (``--weights auto`` takes
the default weights when cached or downloadable, else random weights with a reason);
preprocessing and class names from the chosen weights' enum.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import math
import urllib.error
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UnknownModelError, UsageError, WeightsError, first_line
from actviz.models.checkpoints import (
    StateDict,
    checkpoint_classes,
    load_checkpoint,
    load_state_dict_into,
)
from actviz.models.clips import clip_preprocessing, pair_preprocessing
from actviz.models.families import FAMILIES, family_of, torchvision_family
from actviz.models.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from actviz.models.pretrained import (
    default_weights,
    fetch_pretrained,
    looks_like_enum_name,
    pick_weights,
    weight_names,
    weights_enum,
    weights_label,
)
from actviz.models.sources.base import Built, MetaBuild, ModelEntry, matching
from actviz.models.sources.hints import MODEL_SPELLINGS, other_source_hint
from actviz.models.weights import (
    CHECKPOINT_SUFFIXES,
    WeightsInfo,
    existing_checkpoint,
    looks_like_checkpoint_path,
    seeded,
)

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torchvision.models import WeightsEnum

__all__ = [
    "TorchvisionSource",
    "architecture_kwargs",
    "build_architecture",
    "check_model_name",
    "weights_preprocessing",
]


class TorchvisionSource:
    """torchvision's models by registry name: the source of every plain MODEL name."""

    key = "torchvision"

    def claims(self, model: str) -> bool:
        """Every name no other source claims is looked up in torchvision's registry."""
        return True

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        """torchvision's models with their family and whether ``run`` takes them."""
        from torchvision import models

        families: dict[str, tuple[str, bool]] = {}
        for family in FAMILIES:
            if family.torchvision is None or not (include_all or family.runnable):
                continue
            module = getattr(models, family.torchvision) if family.torchvision else models
            families.update(
                (name, (family.label, family.runnable))
                for name in models.list_models(module=module)
            )
        if include_all:
            for name in models.list_models():  # a family torchvision adds later: not runnable
                families.setdefault(name, ("other", False))
        names = matching(sorted(families), pattern)
        return [ModelEntry(n, *families[n]) for n in names]

    def check_name(self, model: str) -> None:
        """See :func:`check_model_name`."""
        check_model_name(model)

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None = None,
    ) -> Built:
        """Pretrained weights (fetched into torch.hub's cache), a checkpoint, or random."""
        check_model_name(model)
        enum_cls = weights_enum(model)
        spec = weights
        lowered = spec.lower()
        chosen: WeightsEnum | None = None
        state_dict: StateDict | None = None
        if lowered == "none":
            info = WeightsInfo(spec="none", source="random")
        elif lowered in ("auto", "default") or (
            enum_cls is not None
            and looks_like_enum_name(spec)
            and not looks_like_checkpoint_path(spec)
            and not Path(spec).exists()
        ):
            required = lowered != "auto"
            chosen = pick_weights(model, enum_cls, spec, required=required)
            if chosen is None:  # auto, and the model has no pretrained weights at all
                info = WeightsInfo(
                    spec=spec,
                    source="random",
                    reason=f"torchvision has no pretrained weights for {model}",
                )
            else:
                try:
                    state_dict = fetch_pretrained(chosen)
                    info = WeightsInfo(spec=spec, source="pretrained", name=weights_label(chosen))
                except WeightsError as exc:
                    if required:
                        raise
                    info = WeightsInfo(spec=spec, source="random", reason=str(exc))
        else:
            names = f"auto, default, none, {weight_names(enum_cls)}"
            path = existing_checkpoint(spec, model, names)
            state_dict = load_checkpoint(path, trust=trust_checkpoint)
            info = WeightsInfo(spec=spec, source="checkpoint", name=str(path))

        preset = chosen if chosen is not None else default_weights(enum_cls)
        kwargs = architecture_kwargs(model, state_dict, preset, input_size=input_size)
        if info.source == "pretrained" and model in ("inception_v3", "googlenet"):
            # torchvision builds these with transform_input=True whenever it loads their
            # pretrained weights: they were trained on inputs normalized another way.
            kwargs["transform_input"] = True
        module = seeded(lambda: build_architecture(model, **kwargs))
        if state_dict is not None and info.source == "checkpoint":
            classes = checkpoint_classes(module, state_dict)
            if classes is not None:
                # A fine-tuned head: build the architecture with the checkpoint's class count.
                kwargs["num_classes"] = classes
                module = seeded(lambda: build_architecture(model, **kwargs))
        if state_dict is not None:
            load_state_dict_into(module, state_dict, name=model, source=info.name or spec)
        return Built(module, info, preset)

    def build_meta(self, model: str, input_size: tuple[int, int] | None = None) -> MetaBuild:
        """The architecture of the default weights, with no memory and nothing downloaded."""
        import torch

        kwargs = architecture_kwargs(
            model, None, default_weights(weights_enum(model)), input_size=input_size
        )
        family = torchvision_family(model)
        if family is not None and family.meta is not None:
            # Quantized models are calibrated on real tensors while they are built.
            def on_cpu() -> nn.Module:
                return seeded(lambda: build_architecture(model, **kwargs))

            return MetaBuild(None, on_cpu=on_cpu)
        try:
            with torch.device("meta"):  # no memory for parameters, and nothing to download
                module = build_architecture(model, **kwargs)
        except ModelError:
            # Some builders compute their layout with tensors (regnet's widths), which the meta
            # device cannot read back: build on the CPU with only the weights on meta.
            with _weights_on_meta():
                module = build_architecture(model, **kwargs)
        return MetaBuild(module)

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        """The preprocessing of the weights (the default weights' when ``preset`` is None)."""
        weights = preset if preset is not None else default_weights(weights_enum(model))
        return weights_preprocessing(weights, input_size=input_size, in_chans=in_chans)

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        """The weights' categories, unless the model's head has another class count."""
        categories = getattr(preset, "meta", {}).get("categories") if preset else None
        if not isinstance(categories, list):
            return None
        out_features = family_of(module).classes(module)
        if out_features is not None and out_features != len(categories):
            return None  # a checkpoint with its own head: the labels would lie
        return [str(c) for c in categories]

    def versions(self) -> dict[str, str]:
        """torchvision's version."""
        import torchvision

        return {"torchvision": str(torchvision.__version__)}


def weights_preprocessing(
    weights: WeightsEnum | Any | None,
    *,
    input_size: tuple[int, int] | None = None,
    in_chans: int = 3,
) -> Preprocessing:
    """The preprocessing of torchvision weights (ImageNet's standard one without weights),
    adapted to another input size or to greyscale input."""
    transform: Any = weights.transforms() if weights is not None else None
    kind = type(transform).__name__
    if kind in ("VideoClassification", "OpticalFlow"):  # clips and pairs, not images
        if kind == "OpticalFlow":
            return pair_preprocessing(input_size)
        return clip_preprocessing(weights, input_size=input_size)
    resize = _first_int(getattr(transform, "resize_size", None), 256)
    crop = _first_int(getattr(transform, "crop_size", None), resize if transform else 224)
    return Preprocessing.fitted(
        resize=resize,
        crop=crop,
        mean=tuple(float(v) for v in getattr(transform, "mean", IMAGENET_MEAN)),
        std=tuple(float(v) for v in getattr(transform, "std", IMAGENET_STD)),
        interpolation=getattr(getattr(transform, "interpolation", None), "value", "bilinear"),
        # Segmentation presets resize and stop: no crop_size, and the input keeps its shape.
        crops=transform is None or getattr(transform, "crop_size", None) is not None,
        input_size=input_size,
        in_chans=in_chans,
    ).described(
        f"transforms of the torchvision weights {weights_label(weights)}"
        if weights is not None
        else "defaults: ImageNet mean and std, resize 256, centre crop 224 (no weights)"
    )


def _first_int(value: object, default: int) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], int):
        return int(value[0])
    return default


def check_model_name(name: str) -> None:
    """Raise a helpful error unless ``name`` is in torchvision's registry.

    Whether a command takes the model is its family's business
    (:attr:`actviz.models.families.Family.refused`).

    Raises:
        UnknownModelError: With close names.
    """
    from torchvision import models

    every = models.list_models()
    if name not in every and name.lower().endswith(CHECKPOINT_SUFFIXES):
        raise UnknownModelError(
            f"{name} is a checkpoint file, not a model; name the architecture as MODEL and "
            f"pass the file with --weights: a model name (`actviz run resnet50 IMAGE "
            f"--weights {name}`; `actviz models` lists them) or your own factory "
            f"(`actviz run net.py:build IMAGE --weights {name}`)"
        )
    if name in every:
        return
    close = difflib.get_close_matches(name, every, n=3, cutoff=0.6) or difflib.get_close_matches(
        name.lower().replace("-", "_"), every, n=3, cutoff=0.6
    )
    elsewhere = other_source_hint(name)
    if elsewhere is not None:
        close = [elsewhere]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"unknown model '{name}'{hint} (`actviz models` lists torchvision's names; MODEL is "
        f"{MODEL_SPELLINGS})"
    )


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
            # Quantizing announces PyTorch's own deprecation of quantized dtypes, every time.
            warnings.filterwarnings("ignore", ".*quantiz", UserWarning)
            warnings.filterwarnings("ignore", ".*quantiz", DeprecationWarning)
            warnings.filterwarnings("ignore", ".*reduce_range", UserWarning)
            # Built with weights=None, a quantized model is converted before any observer saw
            # data (its weights come after): PyTorch says so, about its own build step.
            warnings.filterwarnings("ignore", "must run observer before", UserWarning)
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
    state_dict: StateDict | None = None,
    weights: WeightsEnum | None = None,
    *,
    input_size: tuple[int, int] | None = None,
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
        input_size: ``--input-size``, for a family whose builders take it (a detector's
            own resize).

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
    family = torchvision_family(name)
    if family is not None:
        if input_size is not None and builder.__module__.endswith((".ssd", ".ssdlite")):
            raise UsageError(
                f"{name} resizes every image to its fixed size itself; leave out --input-size"
            )
        kwargs.update(family.builder_kwargs(input_size))
    if builder.__module__.endswith(".vision_transformer"):
        size = _vit_image_size(state_dict, weights)
        if size is not None and size != 224:
            kwargs["image_size"] = size
    return kwargs


def _vit_image_size(state_dict: StateDict | None, weights: WeightsEnum | None) -> int | None:
    import torch

    if state_dict is not None:
        # The position embedding has one row per patch plus the class token.
        pos, proj = state_dict.get("encoder.pos_embedding"), state_dict.get("conv_proj.weight")
        if not isinstance(pos, torch.Tensor) or not isinstance(proj, torch.Tensor):
            return None
        if pos.ndim != 3 or proj.ndim != 4:
            return None
        side = math.isqrt(int(pos.shape[1]) - 1)
        return side * int(proj.shape[-1]) if side * side == pos.shape[1] - 1 else None
    min_size = weights.meta.get("min_size") if weights is not None else None
    if isinstance(min_size, tuple) and min_size and isinstance(min_size[0], int):
        return min_size[0]
    return None


@contextlib.contextmanager
def _weights_on_meta() -> Iterator[None]:
    """Move every parameter and buffer to the meta device as a module registers it, so that
    building needs neither their memory nor their initialization."""
    from torch import nn

    register_parameter = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer

    def parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def buffer(
        self: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True
    ) -> None:
        register_buffer(self, name, None if tensor is None else tensor.to("meta"), persistent)

    nn.Module.register_parameter = parameter  # type: ignore[method-assign]
    nn.Module.register_buffer = buffer  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]
