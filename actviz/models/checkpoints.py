"""Checkpoint files: read a state_dict without running code from it, and fit it to a model.

``.pt``/``.pth`` files are read with ``torch.load(weights_only=True)``; a pickle that needs
more is refused unless the user says they trust it, and the refusal names the globals it
wanted, found without unpickling it. Safetensors files are recognised by their header, not
their extension. Common wrappers and DataParallel's ``module.`` prefix are unwrapped, and a
state_dict that does not fit is explained key by key.

A state_dict holds tensors, and a quantized Linear's also the two things its packed parameters
save: a ``torch.dtype`` and a (weight, bias) tuple. The safe unpickler reads both.
"""

from __future__ import annotations

import pickletools
import re
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from actviz.errors import CheckpointError, first_line

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "StateDict",
    "checkpoint_classes",
    "load_checkpoint",
    "load_state_dict_into",
    "unwrap_state_dict",
]

#: One value of a state_dict: a tensor, or what a quantized Linear's packed parameters save
#: (``_packed_params.dtype`` and ``_packed_params._packed_params``: weight and bias).
StateValue: TypeAlias = "torch.Tensor | torch.dtype | tuple[torch.Tensor | None, ...]"
StateDict: TypeAlias = "dict[str, StateValue]"


def load_checkpoint(path: Path, *, trust: bool = False) -> StateDict:
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
    return unwrap_state_dict(loaded, path)


def _load_trusted(path: Path, safe_error: Exception) -> object:
    """Full unpickling or TorchScript, for a file the user said they trust."""
    import torch

    try:
        if "TorchScript" in str(safe_error):
            return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
        return torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as exc:
        # The pickle names its classes by the module they were defined in.
        raise CheckpointError(
            f"cannot load trusted checkpoint {path}: it needs the module '{exc.name}', which "
            f"cannot be imported; give MODEL as the factory in {exc.name}.py "
            f"({exc.name}.py:FACTORY), run from the folder that holds it, or save a "
            "state_dict with torch.save(model.state_dict(), path)"
        ) from None
    except Exception as exc:  # whatever the file's own code raises
        raise CheckpointError(f"cannot load trusted checkpoint {path}: {first_line(exc)}") from None


def _is_safetensors(head: bytes) -> bool:
    # An 8-byte little-endian header length, then the JSON header itself.
    return len(head) >= 9 and head[8:9] == b"{"


#: Keys a training script keeps its model's state_dict under, tried in this order.
_WRAPPER_KEYS = (
    "state_dict",
    "model_state_dict",
    "model_state",
    "model",
    "module",
    "net",
    "network",
)


def unwrap_state_dict(loaded: object, path: Path) -> StateDict:
    """The state of a state_dict (its tensors, and a quantized Linear's packed parameters),
    unwrapped from a training checkpoint: under a common key (``state_dict``, ``model_state``,
    ``model``, ``net``, ...; one level or two), or the one nested dict that holds tensors;
    DataParallel's ``module.`` prefix is removed. Other values (an epoch, a config) are left.

    Raises:
        CheckpointError: If no state_dict is found; the message names the keys there are.
    """
    import torch
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    state = loaded
    for _ in range(2):  # {"model": {"state_dict": sd}} is two levels down
        state = _inner(state)
    if not isinstance(state, Mapping) or not state:
        raise CheckpointError(
            f"{path} holds no state_dict (found {type(loaded).__name__}); save one with "
            "torch.save(model.state_dict(), path)"
        )
    tensors: StateDict = OrderedDict(
        (str(k), v) for k, v in state.items() if isinstance(v, torch.Tensor) or _packed_state(k, v)
    )
    if any(isinstance(v, torch.Tensor) for v in tensors.values()):
        # The modules' versions, which tell their loaders which format the keys are in.
        metadata = getattr(state, "_metadata", None)
        if metadata is not None:
            setattr(tensors, "_metadata", metadata)  # noqa: B010 (an OrderedDict's attribute)
    else:
        keys = ", ".join(repr(str(k)) for k in list(state)[:8])
        more = f" (+{len(state) - 8} more)" if len(state) > 8 else ""
        raise CheckpointError(
            f"{path} holds no tensors, only the keys {keys}{more}; save the model's own "
            "state_dict with torch.save(model.state_dict(), path)"
        )
    consume_prefix_in_state_dict_if_present(tensors, "module.")
    return tensors


def _packed_state(key: object, value: object) -> bool:
    """True for what a quantized Linear's packed parameters put in a state_dict besides
    tensors: their dtype and their (weight, bias) tuple, under ``_packed_params.``."""
    import torch

    if str(key).rsplit(".", 2)[-2:-1] != ["_packed_params"]:
        return False
    if isinstance(value, torch.dtype):
        return True
    return (
        isinstance(value, tuple)
        and bool(value)
        and isinstance(value[0], torch.Tensor)
        and all(v is None or isinstance(v, torch.Tensor) for v in value)
    )


def _inner(state: object) -> object:
    """The state_dict one level inside ``state``, or ``state`` when it holds its own."""
    import torch

    if not isinstance(state, Mapping):
        return state
    for key in _WRAPPER_KEYS:
        if isinstance(state.get(key), Mapping):
            return state[key]
    if any(isinstance(v, torch.Tensor) for v in state.values()):
        return state
    # Any other single key whose value holds tensors ({"weights_ema": sd, "epoch": 3}).
    nested = [
        v
        for v in state.values()
        if isinstance(v, Mapping) and any(isinstance(t, torch.Tensor) for t in v.values())
    ]
    return nested[0] if len(nested) == 1 else state


def _checkpoint_failure(path: Path, exc: Exception) -> str:
    if "TorchScript" in str(exc):
        return (
            f"{path} is a TorchScript archive, which runs code when loaded; export a state_dict, "
            "or pass --trust-checkpoint if you trust the file"
        )
    if "Weights only load failed" in str(exc) or "weights_only" in str(exc):
        # torch says this of any bytes its safe unpickler rejects, garbage included; only a
        # pickle that asks for globals is one that trusting could load.
        blocked = _unsafe_globals(path)
        if blocked:
            return (
                f"{path} is a full pickle that could run code when loaded (it wants "
                f"{', '.join(blocked)}); save a plain state_dict with "
                "torch.save(model.state_dict(), path), or pass --trust-checkpoint if you trust "
                "the file"
            )
    return (
        f"corrupt or unsupported checkpoint {path}: {_load_reason(exc)}; give a file written "
        "by torch.save(model.state_dict(), path) or a .safetensors file"
    )


def _load_reason(exc: Exception) -> str:
    """What torch.load found wrong, without its advice to unpickle the file in full."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
    if detail:
        return f"not a PyTorch checkpoint ({detail.group(1).strip()})"
    if isinstance(exc, EOFError):
        return "the file ends too early (empty or truncated)"
    if isinstance(exc, KeyError | IndexError | ValueError) or len(first_line(exc)) < 8:
        # The unpickler's own trip on bytes that are not a pickle: a bare key like "101".
        return "not a file torch.save wrote (neither its zip format nor a pickle)"
    return first_line(exc)


def _unsafe_globals(path: Path) -> list[str]:
    """Name the globals a refused pickle wanted, without running it: the file's own classes
    first, since torch's are rarely the surprise. Empty when the file names none (garbage,
    a truncated file)."""
    import torch

    try:
        found = [str(g) for g in torch.serialization.get_unsafe_globals_in_checkpoint(str(path))]
    except Exception:  # not a zip checkpoint: read the raw pickle's opcodes instead
        found = _raw_pickle_globals(path)
    ordered = sorted(set(found), key=lambda g: (_familiarity(g), g))
    if len(ordered) > 5:
        return [*ordered[:5], f"+{len(ordered) - 5} more"]
    return ordered


def _familiarity(name: str) -> int:
    """0 for the file's own globals, 1 for torch's modules, 2 for torch's and Python's
    plumbing (tensor rebuilding, OrderedDict), which every pickled model names."""
    if not name.startswith(("torch.", "collections.", "builtins.", "__builtin__.", "_codecs.")):
        return 0
    return 1 if name.startswith("torch.nn.") else 2


#: Opcodes that push a string, fetch from the memo, and store into it.
_STRING_OPS = {
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "UNICODE",
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
#: torch.save's legacy format is several pickles in a row; the model is the fourth.
_MAX_PICKLES = 4


def _raw_pickle_globals(path: Path) -> list[str]:
    # pickletools only decodes opcodes; nothing is imported or called.

    found: list[str] = []
    try:
        with path.open("rb") as fh:
            for _ in range(_MAX_PICKLES):
                if not fh.peek(1):
                    break
                memo: dict[int, str | None] = {}
                # The last two values pushed, as far as they are strings: STACK_GLOBAL's
                # module and name, which pickles often fetch back from the memo.
                recent: list[str | None] = [None, None]
                for opcode, arg, _pos in pickletools.genops(fh):
                    name = opcode.name
                    if name in _PUT_OPS:
                        memo[arg if isinstance(arg, int) else len(memo)] = recent[-1]
                        continue
                    if name in ("PROTO", "FRAME"):
                        continue
                    if name == "GLOBAL" and isinstance(arg, str):
                        found.append(arg.replace(" ", "."))
                    elif name == "STACK_GLOBAL" and None not in recent:
                        found.append(".".join(str(part) for part in recent))
                    if name in _STRING_OPS and isinstance(arg, str):
                        value: str | None = arg
                    elif name in _GET_OPS and isinstance(arg, int):
                        value = memo.get(arg)
                    else:
                        value = None
                    recent = [recent[-1], value]
    except Exception:  # a malformed pickle, or raw tensor bytes after it: keep what was found
        pass
    return list(dict.fromkeys(found))


def checkpoint_classes(module: nn.Module, state: Mapping[str, StateValue]) -> int | None:
    """The class count of a checkpoint whose classifier head differs from the model's."""
    import torch
    from torch import nn

    head: tuple[str, nn.Linear] | None = None
    for qualified, child in module.named_modules():
        if isinstance(child, nn.Linear):
            head = (qualified, child)
    if head is None:
        return None
    weight = state.get(f"{head[0]}.weight")
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        return None
    if weight.shape[0] == head[1].out_features:
        return None
    if weight.shape[1] != head[1].in_features:
        return None  # not just a new head: let the key check explain the mismatch
    return int(weight.shape[0])


def load_state_dict_into(
    module: nn.Module, state: Mapping[str, StateValue], *, name: str, source: str
) -> None:
    """Load ``state`` into ``module`` strictly, or explain key by key why it does not fit.

    A state_dict that lost its modules' versions (rebuilt as a plain dict) is read in the
    format of the model's own keys, which it must match: a quantized Linear's loader needs
    the version to know its packed parameters.
    """
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {_shape_text(state[k])} vs {_shape_text(v)}"
        for k, v in own.items()
        if k in state and _shapes(state[k]) != _shapes(v)
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
    if getattr(state, "_metadata", None) is None:
        state = OrderedDict(state)
        setattr(state, "_metadata", getattr(own, "_metadata", None))  # noqa: B010
    module.load_state_dict(state, strict=True)


def _shapes(value: StateValue) -> object:
    """A state value's shape: a tensor's, each of a packed tuple's; None for a dtype."""
    import torch

    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, tuple):
        return tuple(None if v is None else tuple(v.shape) for v in value)
    return None


def _shape_text(value: StateValue) -> str:
    shapes = _shapes(value)
    return str(shapes) if shapes is not None else str(value)


def _few(items: list[str], n: int = 5) -> str:
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return ", ".join(items[:n]) + more
