"""The errors actviz raises on purpose, and the exit codes they map to.

Every message names the fix. The CLI is the one place that turns these into exit codes;
library code only raises them. This module imports nothing of actviz.
"""

from __future__ import annotations

import importlib
import re
from enum import IntEnum
from types import ModuleType

__all__ = [
    "first_line",
    "import_extra",
    "ActvizError",
    "CheckpointError",
    "DeviceError",
    "ExitCode",
    "ImageLoadError",
    "LayerSelectionError",
    "ModelError",
    "NonFiniteError",
    "OutputError",
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
    """Base class: an expected failure with a message that says how to fix it."""

    exit_code: ExitCode = ExitCode.ERROR


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
