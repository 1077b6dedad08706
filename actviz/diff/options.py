"""The options of a diff, as one frozen dataclass built once and checked when built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices, model_b_weights
from actviz.errors import UsageError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["ALIASES", "DEFAULT_THRESHOLD", "DiffOptions", "Metric"]

Metric = Literal["cosine", "cka"]
#: The default of ``--threshold``: a layer whose mean cosine similarity falls below it diverges.
DEFAULT_THRESHOLD = 0.99
#: ``diff``'s keywords by the command line's names for them (``--channels``).
ALIASES: dict[str, str] = {"channels": "max_channels"}


@dataclass(frozen=True)
class DiffOptions:
    """Everything ``actviz diff`` takes besides the model and the inputs.

    Attributes:
        against: A second checkpoint file: model B is MODEL (or ``against_model``) with it.
        against_model: A second model (a torchvision name, ``file.py:factory``, or, from
            Python, an ``nn.Module`` object) with the same layer names.
        against_weights: Weights of ``against_model`` (default: the same as ``load.weights``).
        layers: Selector of the layers to compare; None picks the architecture's default.
        out: Output folder: ``diff.json``, ``similarity.png``, ``diff.html`` and pictures.
        metric: Which similarity ``threshold`` applies to: ``cosine`` (default) or ``cka``.
        threshold: The first layer whose ``metric`` falls below this is the first divergent.
        images: Draw difference pictures for the first this many images (0: none).
        max_channels: Channels per panel at most (0: all).
        report: Write ``diff.html``.
        png_compression: zlib level of the PNGs.
        load: How model A is built (``weights``, ``device``, ...); model B shares the device,
            trust, input size and channels.
        execution: Batch size, workers, amp, channels-last, overwrite (no resume).
    """

    against: Path | None = None
    against_model: str | nn.Module | None = None
    against_weights: str | None = None
    layers: str | None = None
    out: Path = Path("actviz-diff")
    metric: Metric = "cosine"
    threshold: float = DEFAULT_THRESHOLD
    images: int = 4
    max_channels: int = 16
    report: bool = True
    png_compression: int = 1
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        if self.against is not None and self.against_weights is not None:
            raise UsageError(
                "--against and --against-weights both name model B's weights; give one"
            )
        check_choices(self)
        if not math.isfinite(self.threshold):
            raise UsageError(f"--threshold must be a number, e.g. 0.99; got {self.threshold}")
        if self.images < 0 or self.max_channels < 0:
            raise UsageError("--images and --channels must be at least 0")
        if self.execution.resume:
            raise UsageError("diff has no --resume: it writes one summary; use --overwrite")
        if self.against is not None:
            object.__setattr__(self, "against", Path(self.against))

    @property
    def compares_models(self) -> bool:
        """True when a second model (or checkpoint) was given; False for two images."""
        return self.against is not None or self.against_model is not None

    @property
    def weights_b(self) -> str:
        """The weights of model B, as ``--weights`` would take them."""
        return model_b_weights(self.against, self.against_weights, self.load)
