"""Models: torchvision's registry, weights, checkpoints, preprocessing and the device.

Everything that touches ``torchvision.models`` lives here. Pretrained weights go through
torchvision's weights API, but are fetched and loaded by hand so that a cached file is always
read with ``torch.load(weights_only=True)`` and a missing network fails at once with a message
that says where to put the file.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import re
import socket
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from actviz.errors import (
    CheckpointError,
    DeviceError,
    ModelError,
    UnknownModelError,
    UsageError,
    WeightsError,
)

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from torch import nn
    from torchvision.models import WeightsEnum

__all__ = [
    "LoadedModel",
    "Preprocessing",
    "WeightsInfo",
    "cached_weights_path",
    "list_model_names",
    "load_checkpoint",
    "load_model",
    "resolve_device",
]

#: Families whose input and output contracts differ from "an image batch in, a tensor out".
_UNSUPPORTED_FAMILIES = {
    "detection": "detection",
    "video": "video",
    "optical_flow": "optical-flow",
    "quantization": "quantized",
}
_DOWNLOAD_TIMEOUT_S = 30.0
#: Seed for random initialization (recorded in the manifest).
RANDOM_SEED = 0
# torch.hub names cached files "<name>-<sha256 prefix>.<ext>"; the prefix is checked on download.
_HASH_PREFIX = re.compile(r"-([a-f0-9]{8,})\.")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


def list_model_names(pattern: str | None = None, *, include_all: bool = False) -> list[str]:
    """torchvision model names, optionally filtered by a glob.

    Args:
        pattern: A glob such as ``resnet*``; a pattern without wildcards matches as a
            substring.
        include_all: Also list detection, segmentation, video and other models.

    Returns:
        Sorted model names.
    """
    from torchvision import models

    names = models.list_models() if include_all else models.list_models(module=models)
    if pattern:
        glob = pattern if set("*?[") & set(pattern) else f"*{pattern}*"
        names = [n for n in names if fnmatch.fnmatch(n, glob)]
    return sorted(names)


def resolve_device(spec: str) -> torch.device:
    """Turn ``auto|cpu|cuda|cuda:N|mps`` into a device that is really there.

    Raises:
        UsageError: If the spec is not a device name.
        DeviceError: If the device is not available, with what is available instead.
    """
    import torch

    spec = spec.strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"unknown device '{spec}'; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DeviceError(
                f"CUDA is not available here (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda or 'none'}, 0 GPUs visible); "
                "use --device cpu or --device auto"
            )
        if device.index is not None and device.index >= count:
            raise DeviceError(
                f"{spec} does not exist: {count} GPU(s) visible (cuda:0..cuda:{count - 1}); "
                "pick one of those or use --device auto"
            )
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError("MPS is not available here; use --device cpu or --device auto")
        return device
    raise UsageError(f"unsupported device '{spec}'; use auto, cpu, cuda, cuda:N or mps")


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

    from actviz.factories import build_user_model, is_factory_spec

    torch_device = resolve_device(device)
    if in_chans not in (1, 3):
        raise UsageError(f"--in-chans must be 1 or 3, not {in_chans}")
    spec = weights.strip()
    if is_factory_spec(name):
        module = _seeded(lambda: build_user_model(name))
        info = WeightsInfo(spec=spec, source="factory", name=name)
        if spec.lower() not in ("auto", "none"):
            path = _existing_checkpoint(spec, name, None)
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
    return LoadedModel(
        name=name,
        module=module,
        weights=info,
        preprocess=preprocess,
        input_size=preprocess.crop_size,
        categories=_categories(transforms_from, module),
        device=torch_device,
    )


def _torchvision_model(
    name: str, spec: str, trust_checkpoint: bool
) -> tuple[nn.Module, WeightsInfo, WeightsEnum | None]:
    from torchvision import models

    check_model_name(name)
    enum_cls = _weights_enum(name)
    lowered = spec.lower()
    chosen: WeightsEnum | None = None
    state_dict: Mapping[str, torch.Tensor] | None = None
    if lowered == "none":
        info = WeightsInfo(spec="none", source="random")
    elif lowered in ("auto", "default") or (
        enum_cls is not None and _looks_like_enum_name(spec) and not Path(spec).exists()
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

    kwargs: dict[str, Any] = {}
    module = _seeded(lambda: _build(models, name, kwargs))
    if state_dict is not None and info.source == "checkpoint":
        classes = _checkpoint_classes(module, state_dict)
        if classes is not None:
            # A fine-tuned head: build the architecture with the checkpoint's class count.
            kwargs["num_classes"] = classes
            module = _seeded(lambda: _build(models, name, kwargs))
    if state_dict is not None:
        _load_state_dict(module, state_dict, name=name, source=info.name or spec)
    return module, info, (chosen if chosen is not None else _default_enum(enum_cls))


def _build(models: Any, name: str, kwargs: dict[str, Any]) -> nn.Module:
    try:
        built: nn.Module = models.get_model(name, weights=None, **kwargs)
    except Exception as exc:  # a registry builder failing is a model problem, not a bug here
        raise ModelError(f"cannot build {name}: {_first_line(exc)}") from exc
    return built


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """Build with a fixed seed: random weights are then reproducible, the same command draws
    the same pictures, and --resume continues with the very same network."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_SEED)
        return build()


def _existing_checkpoint(spec: str, name: str, enum_cls: type[WeightsEnum] | None) -> Path:
    path = Path(spec).expanduser()
    if not path.is_file():
        valid = _valid_weight_names(enum_cls)
        raise WeightsError(
            f"'{spec}' is neither a weights name of {name} nor an existing file; "
            f"use auto, default, none, {valid}or a checkpoint path"
        )
    return path


def _checkpoint_classes(module: nn.Module, state: Mapping[str, torch.Tensor]) -> int | None:
    """The class count of a checkpoint whose classifier head differs from the model's."""
    from torch import nn

    head: tuple[str, nn.Linear] | None = None
    for qualified, child in module.named_modules():
        if isinstance(child, nn.Linear):
            head = (qualified, child)
    if head is None:
        return None
    weight = state.get(f"{head[0]}.weight")
    if weight is None or weight.ndim != 2 or weight.shape[0] == head[1].out_features:
        return None
    if weight.shape[1] != head[1].in_features:
        return None  # not just a new head: let the key check explain the mismatch
    return int(weight.shape[0])


def check_model_name(name: str) -> None:
    """Raise a helpful error unless ``name`` is a torchvision model actviz can run.

    Raises:
        UnknownModelError: With close names, or the family when it is not supported.
    """
    from torchvision import models

    every = models.list_models()
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


def cached_weights_path(weights: WeightsEnum) -> Path:
    """Where torch.hub keeps (or would keep) the file for these pretrained weights."""
    import torch

    filename = Path(urlparse(weights.url).path).name
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def load_checkpoint(path: Path, *, trust: bool = False) -> dict[str, torch.Tensor]:
    """Read a state_dict from ``.pt``/``.pth`` (safe unpickling only) or ``.safetensors``.

    Common wrappers (``{"state_dict": ...}``, ``{"model": ...}``) and DataParallel's
    ``module.`` prefix are unwrapped.

    Args:
        path: The checkpoint file.
        trust: Also accept a full pickle (a whole pickled model, custom classes) or a
            TorchScript archive. Loading those runs code from the file.

    Raises:
        CheckpointError: If the file is unreadable, not a checkpoint, or needs full unpickling
            without ``trust``.
    """
    import torch

    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if _is_safetensors(head):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise CheckpointError(
                f"{path} is a safetensors file; install it with `pip install safetensors`"
            ) from None
        try:
            loaded: object = load_file(str(path), device="cpu")
        except Exception as exc:  # safetensors raises its own error types
            raise CheckpointError(f"corrupt safetensors checkpoint {path}: {exc}") from None
    else:
        try:
            with warnings.catch_warnings():  # old pickle protocols only warn; refusal is ours
                warnings.simplefilter("ignore", UserWarning)
                loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # unpickling errors come in many types
            if not trust:
                raise CheckpointError(_checkpoint_failure(path, exc)) from None
            loaded = _load_trusted(path, exc)
    if isinstance(loaded, torch.nn.Module):
        loaded = loaded.state_dict()
    return _unwrap_state_dict(loaded, path)


def _load_trusted(path: Path, safe_error: Exception) -> object:
    """Full unpickling or TorchScript, for a file the user said they trust."""
    import torch

    try:
        if "TorchScript" in str(safe_error):
            return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # whatever the file's own code raises
        raise CheckpointError(
            f"cannot load trusted checkpoint {path}: {_first_line(exc)}"
        ) from None


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # torch.hub opens the URL without a timeout; a silently dropping firewall would hang.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _fetch_pretrained(weights: WeightsEnum) -> dict[str, torch.Tensor]:
    """The state_dict of pretrained weights: from the cache, or downloaded into it."""
    import torch

    path = cached_weights_path(weights)
    if not path.exists():
        match = _HASH_PREFIX.search(path.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with _socket_timeout(_DOWNLOAD_TIMEOUT_S):
                torch.hub.download_url_to_file(
                    weights.url, str(path), hash_prefix=match.group(1) if match else None
                )
        except (OSError, RuntimeError) as exc:  # URLError is an OSError; bad hash is Runtime
            why = getattr(exc, "reason", None) or exc
            raise WeightsError(
                f"pretrained weights {_enum_label(weights)} are not cached and could not be "
                f"downloaded ({why}); on a connected machine download {weights.url} and put it "
                f"at {path}, or use --weights none for random weights"
            ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt cache file
        raise WeightsError(
            f"the cached weights file {path} cannot be read ({_first_line(exc)}); delete it "
            "and run again to download it afresh"
        ) from None
    return _unwrap_state_dict(state, path)


def _load_state_dict(
    module: nn.Module, state: Mapping[str, torch.Tensor], *, name: str, source: str
) -> None:
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"missing keys: {_few(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_few(unexpected)}")
        if mismatched:
            parts.append(f"shape mismatches (checkpoint vs model): {_few(mismatched)}")
        raise CheckpointError(
            f"{source} does not fit {name}: {'; '.join(parts)}; check that the checkpoint was "
            f"saved from {name}"
        )
    module.load_state_dict(state, strict=True)


def _few(items: list[str], n: int = 5) -> str:
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def _weights_enum(name: str) -> type[WeightsEnum] | None:
    from torchvision import models

    try:
        enum_cls: type[WeightsEnum] = models.get_model_weights(name)
    except (ValueError, KeyError):  # models without pretrained weights
        return None
    return enum_cls


def _default_enum(enum_cls: type[WeightsEnum] | None) -> WeightsEnum | None:
    if enum_cls is None:
        return None
    default: WeightsEnum | None = getattr(enum_cls, "DEFAULT", None)
    return default


def _looks_like_enum_name(spec: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?", spec) is not None


def _pick_enum(
    name: str, enum_cls: type[WeightsEnum] | None, spec: str, *, required: bool
) -> WeightsEnum | None:
    if enum_cls is None:
        if required:
            raise WeightsError(
                f"torchvision has no pretrained weights for {name}; use --weights none "
                "or a checkpoint path"
            )
        return None
    if spec.lower() in ("auto", "default"):
        return _default_enum(enum_cls)
    member = spec.split(".")[-1]
    for weights in enum_cls:
        if weights.name == member:
            return weights
    raise WeightsError(
        f"unknown weights '{spec}' for {name}; valid: {_valid_weight_names(enum_cls)}"
        "default, none or a checkpoint path"
    )


def _valid_weight_names(enum_cls: type[WeightsEnum] | None) -> str:
    if enum_cls is None:
        return ""
    return "".join(f"{w.name}, " for w in enum_cls)


def _enum_label(weights: WeightsEnum) -> str:
    return f"{type(weights).__name__}.{weights.name}"


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side, centre-crop, scale to [0, 1], normalize: what torchvision's
    ``ImageClassification`` presets do, with the geometry kept so overlays can be aligned.

    Picklable, so DataLoader workers can run it.

    Attributes:
        resize_size: The shorter side after resizing.
        crop_size: ``(height, width)`` of the centre crop: the model's input size.
        mean: Per-channel mean for normalization.
        std: Per-channel standard deviation.
        channels: 3 (RGB) or 1 (greyscale).
        interpolation: ``bilinear`` or ``bicubic`` (antialiased).
    """

    resize_size: int
    crop_size: tuple[int, int]
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    channels: int = 3
    interpolation: str = "bilinear"

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """An RGB PIL image -> a normalized ``(channels, height, width)`` float tensor."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        if self.channels == 1:
            image = image.convert("L")
        mode = InterpolationMode(self.interpolation)
        image = F.resize(image, [self.resize_size], interpolation=mode, antialias=True)
        image = F.center_crop(image, list(self.crop_size))
        tensor = F.convert_image_dtype(F.pil_to_tensor(image))
        normalized: torch.Tensor = F.normalize(tensor, mean=list(self.mean), std=list(self.std))
        return normalized

    @classmethod
    def for_weights(
        cls,
        weights: WeightsEnum | None,
        *,
        input_size: tuple[int, int] | None = None,
        in_chans: int = 3,
    ) -> Preprocessing:
        """The preprocessing of these weights (ImageNet's standard one without weights),
        adapted to another input size or to greyscale input."""
        transform: Any = weights.transforms() if weights is not None else None
        resize = _first_int(getattr(transform, "resize_size", None), 256)
        crop = _first_int(getattr(transform, "crop_size", None), resize if transform else 224)
        mean = tuple(float(v) for v in getattr(transform, "mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in getattr(transform, "std", IMAGENET_STD))
        interpolation = getattr(getattr(transform, "interpolation", None), "value", "bilinear")
        size = (crop, crop)
        if input_size is not None:
            if min(input_size) < 1:
                raise UsageError(f"--input-size must be positive, not {input_size}")
            # Keep the weights' resize-to-crop ratio (256/224 for ImageNet presets).
            resize = max(1, round(max(input_size) * resize / crop))
            size = input_size
        if in_chans == 1:
            mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
        return cls(resize, size, mean, std, in_chans, interpolation)


def _first_int(value: object, default: int) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], int):
        return int(value[0])
    return default


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

    last: nn.Linear | None = None
    for child in module.modules():
        if isinstance(child, nn.Linear):
            last = child
    return last.out_features if last is not None else None


def _is_safetensors(head: bytes) -> bool:
    # An 8-byte little-endian header length, then the JSON header itself.
    return len(head) >= 9 and head[8:9] == b"{"


def _unwrap_state_dict(loaded: object, path: Path) -> dict[str, torch.Tensor]:
    import torch
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    state = loaded
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
            state = state[key]
            break
    if not isinstance(state, Mapping) or not state:
        raise CheckpointError(
            f"{path} holds no state_dict (found {type(loaded).__name__}); save one with "
            "torch.save(model.state_dict(), path)"
        )
    tensors = {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path} holds no tensors; is it a state_dict?")
    consume_prefix_in_state_dict_if_present(tensors, "module.")
    return tensors


def _checkpoint_failure(path: Path, exc: Exception) -> str:
    text = _first_line(exc)
    if "TorchScript" in str(exc):
        return (
            f"{path} is a TorchScript archive, which runs code when loaded; export a state_dict, "
            "or pass --trust-checkpoint if you trust the file"
        )
    if "Weights only load failed" in str(exc) or "weights_only" in str(exc):
        blocked = _unsafe_globals(path)
        names = f" (it wants {', '.join(blocked)})" if blocked else ""
        return (
            f"{path} is a full pickle that could run code when loaded{names}; save a plain "
            "state_dict with torch.save(model.state_dict(), path), or pass --trust-checkpoint "
            "if you trust the file"
        )
    return f"corrupt or unsupported checkpoint {path}: {text}"


def _unsafe_globals(path: Path) -> list[str]:
    """Name the globals a refused pickle wanted, without running it: the file's own classes
    first, since torch's are rarely the surprise."""
    import torch

    try:
        found = [str(g) for g in torch.serialization.get_unsafe_globals_in_checkpoint(str(path))]
    except Exception:  # not a zip checkpoint: read the raw pickle's opcodes instead
        found = _raw_pickle_globals(path)
    ordered = sorted(set(found), key=lambda g: (g.startswith("torch."), g))
    if len(ordered) > 5:
        return [*ordered[:5], f"+{len(ordered) - 5} more"]
    return ordered


def _raw_pickle_globals(path: Path) -> list[str]:
    # pickletools only decodes opcodes; nothing is imported or called.
    import pickletools

    found: list[str] = []
    strings: list[str] = []
    try:
        with path.open("rb") as fh:
            for opcode, arg, _pos in pickletools.genops(fh):
                if isinstance(arg, str):
                    strings = [*strings[-1:], arg]
                if opcode.name == "GLOBAL" and isinstance(arg, str):
                    found.append(arg.replace(" ", "."))
                elif opcode.name == "STACK_GLOBAL" and len(strings) == 2:
                    found.append(".".join(strings))
    except Exception:  # a malformed pickle: explain what was found so far
        pass
    return list(dict.fromkeys(found))


def _first_line(exc: BaseException) -> str:
    # torch's messages carry ANSI bold codes and several paragraphs.
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__
