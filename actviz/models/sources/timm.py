"""timm as a model source: ``timm/NAME[.TAG]``, as the Hugging Face Hub spells timm models.

Names come from timm's registry (``timm/convnext_tiny``, ``timm/convnext_tiny.in12k_ft_in1k``);
the model is built with ``pretrained=False`` and actviz loads the weights itself, from the
local caches only, so nothing waits on the network. Preprocessing comes from the model's own
``pretrained_cfg`` (input size, interpolation, mean and std, crop_pct), class names from the
config's label names or timm's ImageNet information.
"""

from __future__ import annotations

import difflib
import importlib
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import (
    ModelError,
    UnknownModelError,
    WeightsError,
    first_line,
    import_extra,
)
from actviz.models.checkpoints import (
    StateDict,
    checkpoint_classes,
    load_checkpoint,
    load_state_dict_into,
)
from actviz.models.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from actviz.models.sources.base import Built, MetaBuild, ModelEntry
from actviz.models.weights import WeightsInfo, existing_checkpoint, seeded

if TYPE_CHECKING:
    from types import ModuleType

    from torch import nn

__all__ = ["TimmSource", "import_timm"]

PREFIX = "timm/"
#: The ``--weights`` values a timm model takes besides a checkpoint file.
_NAMES = "auto, default, none"
#: Files a timm repository on the Hub keeps its weights in, in timm's order of preference.
_HUB_FILES = ("model.safetensors", "pytorch_model.bin")


def import_timm() -> ModuleType:
    """timm, or a one-line usage error that gives the pip command."""
    return import_extra("timm", "timm", "timm models need the timm library")


class TimmSource:
    """timm's models, spelled ``timm/NAME`` or ``timm/NAME.TAG``."""

    key = "timm"

    def claims(self, model: str) -> bool:
        """Names that start with ``timm/``."""
        return model.startswith(PREFIX)

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        """timm's architectures (in timm's natural order); with ``include_all`` each
        pretrained tag too (``convnext_tiny.fb_in1k``)."""
        timm = import_timm()
        glob = None
        if pattern:
            glob = pattern if set("*?[") & set(pattern) else f"*{pattern}*"
        names = timm.list_pretrained(glob or "") if include_all else timm.list_models(glob or "")
        return [ModelEntry(f"{PREFIX}{name}", "classification", True) for name in names]

    def check_name(self, model: str) -> None:
        """An error with the closest names unless timm knows the architecture and tag."""
        timm = import_timm()
        name = model.removeprefix(PREFIX)
        arch, _, tag = name.partition(".")
        if not arch or not timm.is_model(arch):
            every = timm.list_models()
            close = difflib.get_close_matches(arch.lower().replace("-", "_"), every, n=3)
            hint = f"; did you mean {' or '.join(PREFIX + c for c in close)}?" if close else ""
            raise UnknownModelError(
                f"unknown timm model '{name}'{hint} (`actviz models --source timm` lists them)"
            )
        if tag and _pretrained_cfg(name) is None:
            tags = [t.partition(".")[2] for t in timm.list_pretrained(f"{arch}.*")]
            known = f"; its tags: {', '.join(tags)}" if tags else f"; {arch} has no tags"
            raise UnknownModelError(f"unknown tag '{tag}' for timm model {arch}{known}")

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None = None,
    ) -> Built:
        """Pretrained weights from the local caches, a checkpoint, or random (seeded)."""
        self.check_name(model)
        name = model.removeprefix(PREFIX)
        lowered = weights.lower()
        state: StateDict | None = None
        if lowered == "none":
            info = WeightsInfo(spec="none", source="random")
        elif lowered in ("auto", "default"):
            try:
                path, label = _cached_pretrained(name)
                state = load_checkpoint(path)
                info = WeightsInfo(spec=weights, source="pretrained", name=label)
            except WeightsError as exc:
                if lowered != "auto":
                    raise
                info = WeightsInfo(spec=weights, source="random", reason=str(exc))
        else:
            path = existing_checkpoint(weights, model, _NAMES)
            state = load_checkpoint(path, trust=trust_checkpoint)
            info = WeightsInfo(spec=weights, source="checkpoint", name=str(path))
        module = seeded(lambda: create(name, input_size))
        if state is not None:
            state = _converted(module, state)
            classes = checkpoint_classes(module, state)
            if classes is not None and info.source == "checkpoint":
                # A fine-tuned head: build the architecture with the checkpoint's class count.
                module = seeded(lambda: create(name, input_size, num_classes=classes))
            load_state_dict_into(module, state, name=model, source=info.name or weights)
        classes = getattr(module, "num_classes", 1)
        return Built(module, info, _data_config(module), classifier=classes != 0)

    def build_meta(self, model: str, input_size: tuple[int, int] | None = None) -> MetaBuild:
        """The architecture with its parameters on the meta device: no memory, no download."""
        import torch

        self.check_name(model)
        name = model.removeprefix(PREFIX)
        with torch.device("meta"):
            return MetaBuild(create(name, input_size))

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        """What ``timm.data.create_transform`` does for the model's data config: resize the
        shorter side to ``size / crop_pct``, centre-crop ``size``, normalize."""
        config = preset if isinstance(preset, dict) else _default_data_config(model)
        _, height, width = config.get("input_size", (3, 224, 224))
        crop_pct = float(config.get("crop_pct") or 0.875)
        size = input_size or (int(height), int(width))
        mode = str(config.get("crop_mode") or "center")
        origin = f"timm pretrained_cfg of {model.removeprefix(PREFIX)}"
        if mode not in ("center", "squash"):
            origin += f" (its crop_mode {mode} is done as a centre crop)"
        crop = max(size)
        return Preprocessing.fitted(
            resize=math.floor(crop / crop_pct),
            crop=crop,
            mean=tuple(float(v) for v in config.get("mean", IMAGENET_MEAN)),
            std=tuple(float(v) for v in config.get("std", IMAGENET_STD)),
            interpolation=str(config.get("interpolation") or "bicubic"),
            input_size=size if size[0] != size[1] else None,
            in_chans=in_chans,
            squash=mode == "squash",
        ).described(origin)

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        """The config's label names, else timm's ImageNet names when the head has 1000 or
        21843 classes as the pretrained config says; None for a backbone."""
        classes = getattr(module, "num_classes", None)
        if not isinstance(classes, int) or classes <= 0:
            return None
        cfg = dict(getattr(module, "pretrained_cfg", None) or {})
        labels = cfg.get("label_names")
        if isinstance(labels, (list, tuple)) and len(labels) == classes:
            return [str(label) for label in labels]
        data = _timm_data()
        subset = data.infer_imagenet_subset(cfg) if cfg.get("num_classes") == classes else None
        if not subset:
            return None
        info = data.ImageNetInfo(subset)
        names = [str(d) for d in info.label_descriptions()]
        return names if len(names) == classes else None

    def versions(self) -> dict[str, str]:
        """timm's version."""
        return {"timm": str(import_timm().__version__)}


def create(name: str, input_size: tuple[int, int] | None = None, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, pretrained=False, ...)``, its failures as one-line errors.

    With ``input_size``, architectures whose layout depends on it (ViTs' position embeddings,
    Swin's windows) are built for it through their ``img_size``; the others take any size.
    """
    timm = import_timm()
    try:
        if input_size is not None:
            try:
                built: nn.Module = timm.create_model(
                    name, pretrained=False, img_size=input_size, **kwargs
                )
                return built
            except TypeError as exc:
                if "img_size" not in str(exc):
                    raise
        built = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # a builder failing is a model problem, not a bug here
        raise ModelError(f"cannot build timm/{name}: {first_line(exc)}") from exc
    return built


def _pretrained_cfg(name: str) -> Mapping[str, Any] | None:
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # an unknown tag
        return None
    return dict(cfg.__dict__) if cfg is not None else None


def _timm_data() -> Any:

    return importlib.import_module("timm.data")


def _data_config(module: nn.Module) -> dict[str, Any]:
    config: dict[str, Any] = _timm_data().resolve_data_config({}, model=module)
    return config


def _default_data_config(model: str) -> dict[str, Any]:
    """The data config of the model's pretrained config, without building it."""
    cfg = _pretrained_cfg(model.removeprefix(PREFIX)) or {}
    config: dict[str, Any] = _timm_data().resolve_data_config({}, pretrained_cfg=dict(cfg))
    return config


def _cached_pretrained(name: str) -> tuple[Path, str]:
    """The pretrained weights file in the local Hub or torch.hub cache, and its label.

    Never downloads: without the file this raises at once, with the command that fetches it.
    """
    cfg = _pretrained_cfg(name) or {}
    hub_id = cfg.get("hf_hub_id")
    url = cfg.get("url")
    if hub_id:
        from huggingface_hub import try_to_load_from_cache

        wanted = cfg.get("hf_hub_filename")
        for filename in (wanted,) if wanted else _HUB_FILES:
            found = try_to_load_from_cache(str(hub_id), str(filename))
            if isinstance(found, str):
                return Path(found), str(hub_id)
        fetch = f"`hf download {hub_id}`"
    elif url:
        import torch

        path = Path(torch.hub.get_dir()) / "checkpoints" / Path(str(url)).name
        if path.is_file():
            return path, str(url)
        fetch = f"download {url} to {path}"
    else:
        raise WeightsError(f"timm has no pretrained weights for {name}")
    raise WeightsError(
        f"pretrained weights for timm/{name} are not cached; on a connected machine run "
        f"{fetch} and copy the cache here, or use --weights none for random weights"
    )


def _converted(module: nn.Module, state: StateDict) -> StateDict:
    """A checkpoint as the model's own module converts it (original-format keys, position
    embeddings resampled to another input size); unchanged where there is nothing to do."""
    convert = getattr(sys.modules.get(type(module).__module__), "checkpoint_filter_fn", None)
    if convert is None:
        return state
    try:
        converted = convert(state, module)
    except Exception:  # a converter for other formats: the key check explains any mismatch
        return state
    return dict(converted) if isinstance(converted, Mapping) else state
