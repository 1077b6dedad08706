"""Hugging Face transformers as a model source: ``hf:FOLDER`` or ``hf:ORG/NAME``.

A ``save_pretrained`` folder, or a model id already in the local Hub cache: nothing is ever
downloaded (everything is read with ``local_files_only``), so nothing waits on the network.
The class ``config.architectures`` names is built with its head (see
:mod:`~actviz.models.sources.hf_heads`): classifiers give class scores, semantic segmentation
heads class maps, detection heads run while their backbone's maps are drawn; a config that
names no head is run as a backbone (``AutoModel``). The folder's image processor prepares each
image (see :mod:`~actviz.models.sources.hf_processing`), class names come from
``config.id2label``. The model's forward returns its ``.logits`` (a backbone's
``last_hidden_state``), so top-k predictions and Grad-CAM read it like any classifier; module
names are those of ``named_modules()``.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import (
    CheckpointError,
    ModelError,
    UnknownModelError,
    UsageError,
    first_line,
    import_extra,
)
from actviz.models.checkpoints import load_checkpoint, load_state_dict_into
from actviz.models.preprocessing import (
    Preprocessing,
    PreprocessingWarning,
)
from actviz.models.sources.base import Built, MetaBuild, ModelEntry, matching
from actviz.models.sources.hf_heads import Head, HeadWarning, model_head
from actviz.models.sources.hf_processing import from_processor
from actviz.models.weights import WeightsInfo, existing_checkpoint, seeded

if TYPE_CHECKING:
    from types import ModuleType

    from torch import nn

__all__ = ["HuggingFaceSource", "import_transformers"]

PREFIX = "hf:"
_NAMES = "auto, default, none"
#: Files a save_pretrained folder keeps its weights in.
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def import_transformers() -> ModuleType:
    """transformers, or a one-line usage error that gives the pip command."""
    return import_extra("transformers", "hf", "Hugging Face models need the transformers library")


class HuggingFaceSource:
    """transformers vision models, spelled ``hf:FOLDER`` or ``hf:ORG/NAME`` (cached)."""

    key = "hf"

    def claims(self, model: str) -> bool:
        """Names that start with ``hf:``."""
        return model.startswith(PREFIX)

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        """The models in the local Hugging Face cache (nothing else can be loaded offline)."""
        import_transformers()
        from huggingface_hub import scan_cache_dir

        try:
            repos = [r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model"]
        except Exception:  # no cache folder yet
            repos = []
        names = matching(sorted(f"{PREFIX}{repo}" for repo in repos), pattern)
        return [ModelEntry(name, "vision", True) for name in names]

    def check_name(self, model: str) -> None:
        """An error that says what to do unless the folder or cached id has a vision config."""
        self._config(model)

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None = None,
    ) -> Built:
        """The folder's (or cache's) weights, a checkpoint file, or random (seeded)."""
        ref, config = self._config(model)
        head = model_head(config, import_transformers())
        lowered = weights.lower()
        module: nn.Module
        if lowered in ("auto", "default") and _weights_file(ref) is not None:
            module = _from_pretrained(head, ref, config, model)
            info = WeightsInfo(spec=weights, source="pretrained", name=ref)
        elif lowered in ("auto", "default", "none"):
            if lowered == "default":
                raise CheckpointError(
                    f"{model} has no weights file ({', '.join(_WEIGHT_FILES[::2])}); save the "
                    "model with save_pretrained, or use --weights none for random weights"
                )
            module = _built(head, config, model)
            reason = None if lowered == "none" else f"{ref} holds no weights file"
            info = WeightsInfo(spec=weights, source="random", reason=reason)
        else:
            path = existing_checkpoint(weights, model, _NAMES)
            state = load_checkpoint(path, trust=trust_checkpoint)
            module = _built(head, config, model)
            load_state_dict_into(module, state, name=model, source=str(path))
            info = WeightsInfo(spec=weights, source="checkpoint", name=str(path))
        _return_tensor(module, head)
        note = head.note(model)
        if note is not None:
            warnings.warn(note, HeadWarning, stacklevel=2)
        return Built(module, info, (ref, config), classifier=head.scores)

    def build_meta(self, model: str, input_size: tuple[int, int] | None = None) -> MetaBuild:
        """The architecture from its config, with its parameters on the meta device."""
        import torch

        _, config = self._config(model)
        head = model_head(config, import_transformers())
        with torch.device("meta"):
            module = _built(head, config, model, seed=False)
        _return_tensor(module, head)

        def on_cpu() -> nn.Module:
            # Detection models read values (DETR's masks) that the meta device does not hold.
            built = _built(head, config, model)
            _return_tensor(built, head)
            return built

        return MetaBuild(module, on_cpu=on_cpu)

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        """The image processor's resize, crop, rescale and normalization; without a
        ``preprocessor_config.json``, ImageNet's defaults at the config's image size."""
        ref, config = preset if isinstance(preset, tuple) else self._config(model)
        processor = _processor(ref)
        size = _config_size(config)
        if processor is None:
            side = max(size)
            defaults = (
                f"ImageNet mean and std, bilinear resize to {round(side * 256 / 224)} and "
                f"centre crop to {side} (the config's image_size)"
            )
            warnings.warn(
                f"{ref} has no preprocessor_config.json, so its inputs are prepared with "
                f"{defaults}; save the model's image processor there "
                "(processor.save_pretrained(FOLDER)) if it was trained otherwise",
                PreprocessingWarning,
                stacklevel=2,
            )
            return Preprocessing.fitted(
                resize=round(side * 256 / 224), crop=side, input_size=input_size, in_chans=in_chans
            ).described(f"defaults: {ref} has no preprocessor_config.json, so {defaults}")
        return from_processor(processor, ref, size, input_size, in_chans)

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        """``config.id2label`` in index order, when it names every class of the head."""
        config = getattr(module, "config", None)
        labels = getattr(config, "id2label", None)
        classes = getattr(config, "num_labels", None)
        if not isinstance(labels, dict) or not isinstance(classes, int):
            return None
        if not getattr(module, "_actviz_classifier", False):
            return None
        names = [labels.get(i, labels.get(str(i))) for i in range(classes)]
        if any(name is None for name in names):
            return None
        # A config without labels of its own says LABEL_0, LABEL_1, ...: no names at all.
        if all(re.fullmatch(r"LABEL_\d+", str(name)) for name in names):
            return None
        return [str(name) for name in names]

    def versions(self) -> dict[str, str]:
        """transformers' version."""
        return {"transformers": str(import_transformers().__version__)}

    def _config(self, model: str) -> tuple[str, Any]:
        """The folder or id, and its config; one-line errors that say what to do."""
        transformers = import_transformers()
        ref = model.removeprefix(PREFIX).strip()
        if not ref:
            raise UsageError("hf: names no model; write hf:FOLDER or hf:ORG/NAME")
        folder = Path(ref).expanduser()
        if folder.is_dir():
            ref = str(folder)
            if not (folder / "config.json").is_file():
                raise UnknownModelError(
                    f"{ref} has no config.json: not a save_pretrained folder; save the model "
                    "with model.save_pretrained(FOLDER)"
                )
        elif not _cached(ref, "config.json"):
            raise UnknownModelError(
                f"'{ref}' is neither a folder nor a model in the local Hugging Face cache; on "
                f"a connected machine run `hf download {ref}` and copy the cache here, or "
                "give the folder a save_pretrained wrote"
            )
        try:
            with _quiet():
                config = transformers.AutoConfig.from_pretrained(ref, local_files_only=True)
        except Exception as exc:  # an unknown model_type, a malformed config.json
            raise UnknownModelError(
                f"cannot read the config of {ref}: {first_line(exc)}; check that it is a "
                "transformers model (upgrading transformers adds newer architectures)"
            ) from exc
        if getattr(config, "num_channels", None) is None and not hasattr(config, "image_size"):
            kind = getattr(config, "model_type", "unknown")
            raise UnknownModelError(
                f"{ref} is a {kind} model, not a vision model; actviz runs image classifiers "
                "and vision backbones (ViT, ConvNeXt, Swin, DINOv2, ...)"
            )
        return ref, config


def _cached(repo: str, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo, filename), str)
    except Exception:  # not a valid repository id
        return False


def _weights_file(ref: str) -> str | None:
    folder = Path(ref)
    for name in _WEIGHT_FILES:
        if folder.is_dir() and (folder / name).is_file():
            return name
        if not folder.is_dir() and _cached(ref, name):
            return name
    return None


def _built(head: Head, config: Any, model: str, *, seed: bool = True) -> nn.Module:
    def build() -> nn.Module:
        try:
            with _quiet():
                built: nn.Module = head.construct(config)
        except Exception as exc:  # an architecture transformers cannot build
            raise UnknownModelError(
                f"cannot build {model}: {first_line(exc)}; check its config.json"
            ) from exc
        _check_vision(built, model)
        return built

    return seeded(build) if seed else build()


def _from_pretrained(head: Head, ref: str, config: Any, model: str) -> nn.Module:
    try:
        with _quiet():
            built, info = head.cls.from_pretrained(
                ref, config=config, local_files_only=True, output_loading_info=True
            )
    except Exception as exc:  # a weights file for another architecture, a corrupt file
        raise CheckpointError(
            f"cannot load the weights of {model}: {first_line(exc)}; check that they were "
            "saved from this model, or use --weights none"
        ) from exc
    missing = list(info.get("missing_keys") or []) if isinstance(info, dict) else []
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CheckpointError(
            f"the weights of {model} lack {len(missing)} of the model's tensors ({shown}); "
            "they were saved from another architecture; use --weights none or a matching file"
        )
    _check_vision(built, model)
    result: nn.Module = built
    return result


def _check_vision(module: nn.Module, model: str) -> None:
    wants = getattr(module, "main_input_name", "pixel_values")
    if wants != "pixel_values":
        raise UnknownModelError(
            f"{model} takes {wants}, not images; actviz runs image classifiers and vision backbones"
        )


def _return_tensor(module: nn.Module, head: Head) -> None:
    """Make the model's forward return one tensor: the head's field (``logits``), else the
    first tensor of its output. The class is swapped for a subclass of the same name, so module
    names, types and hooks stay as they were."""
    import torch

    cls = type(module)
    if getattr(cls, "_actviz_field", None) is not None:
        return
    field = head.field

    def forward(self: nn.Module, pixel_values: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = cls.forward(self, pixel_values, *args, **kwargs)
        value = getattr(out, field, None)
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(out, (tuple, list)) or hasattr(out, "to_tuple"):
            items = out.to_tuple() if hasattr(out, "to_tuple") else out
            for item in items:
                if isinstance(item, torch.Tensor):
                    return item
        return out

    namespace = {
        "forward": forward,
        "_actviz_field": field,
        "_actviz_classifier": head.scores,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    module.__class__ = type(cls.__name__, (cls,), namespace)


def _processor(ref: str) -> Any | None:
    """The folder's image processor as ``AutoImageProcessor.from_pretrained`` gives it by
    default (what ``pipeline()`` runs: the torchvision backend in transformers 5, where it has
    one), or None without a ``preprocessor_config.json``."""
    folder = Path(ref)
    has = (folder / "preprocessor_config.json").is_file() if folder.is_dir() else None
    if has is None:
        has = _cached(ref, "preprocessor_config.json")
    if not has:
        return None
    transformers = import_transformers()
    try:
        with _quiet():
            return transformers.AutoImageProcessor.from_pretrained(ref, local_files_only=True)
    except Exception as exc:
        raise ModelError(
            f"cannot read the image processor of {ref}: {first_line(exc)}; fix or remove its "
            "preprocessor_config.json"
        ) from exc


def _config_size(config: Any) -> tuple[int, int]:
    size = getattr(config, "image_size", 224)
    if isinstance(size, (tuple, list)) and len(size) == 2:
        return int(size[0]), int(size[1])
    return (int(size), int(size)) if isinstance(size, int) else (224, 224)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' own progress bars and advice, kept off actviz's output."""
    transformers = import_transformers()
    logging = transformers.utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
