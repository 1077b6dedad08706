"""The errors actviz raises on purpose, and the exit codes they map to.

Every message names the fix. The CLI is the one place that turns these into exit codes;
library code only raises them. This module imports nothing of actviz.

Messages are written once, naming options as the command line spells them (``--k 8``,
``--resume``); the command line shows them so. A caller of the Python API reads them with its
keywords instead (``k=8``, ``resume=True``): :meth:`ActvizError.__str__` respells the flags
outside backticks (a quoted command line stays one) unless the CLI is running a command
(:func:`command_line_spelling`).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Iterator
from enum import IntEnum
from types import ModuleType

__all__ = [
    "command_line_spelling",
    "first_line",
    "import_extra",
    "python_spelling",
    "ActvizError",
    "CheckpointError",
    "DeviceError",
    "ExitCode",
    "ImageLoadError",
    "LayerSelectionError",
    "ModelError",
    "NonFiniteError",
    "OutputError",
    "SettingsChanged",
    "UsageError",
    "UnknownModelError",
    "UnknownWeightsError",
    "VideoLoadError",
    "WeightsError",
]


class ExitCode(IntEnum):
    """Process exit codes, documented in docs/cli.md."""

    OK = 0
    ERROR = 1
    USAGE = 2
    PARTIAL = 3
    ANOMALY = 4
    INTERRUPTED = 130
    TERMINATED = 143


class ActvizError(Exception):
    """Base class: an expected failure with a message that says how to fix it.

    ``str()`` names options as the caller spells them: the command line's flags while the
    CLI runs a command, the Python keywords otherwise (:func:`python_spelling`).
    """

    exit_code: ExitCode = ExitCode.ERROR

    def __str__(self) -> str:
        text = super().__str__()
        return text if _SPELLING["cli"] else python_spelling(text)


#: Whether the CLI is running a command: a process-wide switch, not a context variable, so
#: that a message put together in a worker thread reads the same.
_SPELLING = {"cli": False}


@contextlib.contextmanager
def command_line_spelling() -> Iterator[None]:
    """Inside the block, errors name options as the command line spells them."""
    before = _SPELLING["cli"]
    _SPELLING["cli"] = True
    try:
        yield
    finally:
        _SPELLING["cli"] = before


#: Flags that take no value: the keyword is set to True (``--no-X``: X to False).
_SWITCHES = frozenset(
    {
        "amp",
        "cam",
        "channels-last",
        "grads",
        "neuron",
        "overlay",
        "overwrite",
        "pca-mask",
        "prefix-tokens",
        "resume",
        "trust-checkpoint",
    }
)
#: Flags whose keyword has another name (``--top-k``) or that stand for a switch with a value.
_KEYWORDS = {"top-k": "k", "json": "as_json", "all": "include_all"}
#: Values a flag may be followed by that are values, not the sentence's next word.
_VALUES = frozenset(
    {
        "auto", "default", "none", "cpu", "cuda", "mps", "ray", "local", "grid", "tokens",
        "nchw", "nhwc", "npy", "pt", "input", "output", "both", "attn", "shared", "layer",
        "channel", "image", "max", "mean", "index", "topk", "batchtopk",
    }
)  # fmt: skip
_FLAG = re.compile(r"(?<![\w`-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?: ([\w.,{}\[\]()-]+))?")
#: The one short flag messages name: ``-k`` (top-images' and sae's k).
_SHORT = re.compile(r"(?<![\w`-])-k(?![\w-])")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
_PAIR = re.compile(r"(\w+),(\w+)")


def python_spelling(text: str) -> str:
    """``text`` with the command line's flags as the Python API's keywords: ``--k 8`` ->
    ``k=8``, ``--resume`` -> ``resume=True``, ``--no-pages`` -> ``pages=False``, ``--view
    pca`` -> ``pca=True``, ``--weights none`` -> ``weights='none'``, ``--input-size H,W`` ->
    ``input_size=(H, W)``, ``--layers`` -> ``layers``. What is inside backticks (a command
    line to run) is left as it is."""
    parts = text.split("`")
    return "`".join(
        part if i % 2 else _FLAG.sub(_keyword, _SHORT.sub("--k", part))
        for i, part in enumerate(parts)
    )


def _keyword(match: re.Match[str]) -> str:
    flag, value = match.group(1), match.group(2)
    rest = f" {value}" if value is not None else ""
    if flag in ("help", "debug", "version"):  # the command line's own
        return match.group(0)
    if flag in _SWITCHES:
        return f"{flag.replace('-', '_')}=True{rest}"
    if flag.startswith("no-"):
        return f"{flag[3:].replace('-', '_')}=False{rest}"
    if flag == "view" and value is not None and value.rstrip(".,:;)") == "pca":
        return f"pca=True{value[3:]}"
    name = _KEYWORDS.get(flag, flag.replace("-", "_"))
    if value is None:
        return name
    bare, tail = _split_tail(value)
    if _NUMBER.fullmatch(bare):
        return f"{name}={bare}{tail}"
    pair = _PAIR.fullmatch(bare)
    if pair is not None:
        return f"{name}=({pair.group(1)}, {pair.group(2)}){tail}"
    if bare in _VALUES:
        return f"{name}={bare!r}{tail}"
    return f"{name}{rest}"


def _split_tail(value: str) -> tuple[str, str]:
    """A value and the punctuation that ends the sentence's clause after it."""
    bare = value.rstrip(".,;:)")
    return bare, value[len(bare) :]


class UsageError(ActvizError):
    """An option value that cannot work (a bad selector, a bad combination)."""

    exit_code = ExitCode.USAGE


class UnknownModelError(UsageError):
    """The model name is not in torchvision's registry."""


class LayerSelectionError(UsageError):
    """The layer selector is malformed or matches nothing."""


class WeightsError(ActvizError):
    """Requested weights are unknown or cannot be had."""


class UnknownWeightsError(WeightsError, UsageError):
    """A ``--weights`` value that names no weights of the model and no file: a usage error."""


class CheckpointError(WeightsError):
    """A checkpoint file is unreadable, unsafe or does not fit the model."""


class ModelError(ActvizError):
    """The model cannot be built or run."""


class NonFiniteError(ActvizError):
    """Training produced a NaN or Inf, with ``on_nonfinite="raise"``: names where it began.

    Attributes:
        step: The training step (0-based) it happened in.
        module: The qualified name of the module that produced it.
        phase: ``forward`` or ``backward``.
        value: ``NaN`` or ``Inf``.
        inputs_file: Where the module's inputs were saved, or None.
    """

    exit_code = ExitCode.ANOMALY

    def __init__(
        self,
        step: int,
        module: str,
        phase: str,
        value: str,
        inputs_file: str | None,
        *,
        module_type: str = "",
        message: str | None = None,
    ) -> None:
        where = f"; its inputs are in {inputs_file}" if inputs_file else ""
        kind = f" ({module_type})" if module_type else ""
        said = message or (
            f"step {step}: {module}{kind} produced the first {value} in the {phase} pass"
            f"{where}; look at that module's computation (or lower the learning rate)"
        )
        # ``message``: what happened, said otherwise (a loss that was NaN by itself).
        super().__init__(f'{said}; pass on_nonfinite="record" to keep training')
        self.step = step
        self.module = module
        self.phase = phase
        self.value = value
        self.inputs_file = inputs_file


class DeviceError(ActvizError):
    """The requested device is not available."""


class ImageLoadError(ActvizError):
    """An input image cannot be opened or decoded."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot read image {path}: {reason}")
        self.path = path
        self.reason = reason


class VideoLoadError(ImageLoadError):
    """An input video (a file, an animation or a folder of frames) cannot be read."""

    def __init__(self, path: str, reason: str) -> None:
        ActvizError.__init__(self, f"cannot read video {path}: {reason}")
        self.path = path
        self.reason = reason


class OutputError(ActvizError):
    """The output folder cannot be written, or holds an earlier run."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        if usage:
            self.exit_code = ExitCode.USAGE


class SettingsChanged(OutputError, UsageError):
    """``--resume`` into a folder written with other settings: a usage error (exit 2) that
    names what changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, usage=True)


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (its type's name when it has none), for
    one-line errors that quote a library's or the user's code's own words."""
    # torch's messages carry ANSI bold codes and several paragraphs.
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def import_extra(module: str, extra: str, needs: str) -> ModuleType:
    """Import an optional library, or raise a one-line :class:`UsageError` that says who
    ``needs`` it and gives the pip command of actviz's ``extra`` that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{needs}: pip install 'actviz[{extra}]'") from None
