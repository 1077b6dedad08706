"""The options of ``actviz optimize``: one frozen dataclass. Importing it imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.command.options import LoadOptions, from_flat
from actviz.errors import UsageError
from actviz.optimize.objective import parse_channels

__all__ = ["OptimizeOptions"]

_MAX_STEPS = 100_000
_MIN_SIZE, _MAX_SIZE = 16, 1024


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything ``actviz optimize`` takes besides the model.

    Attributes:
        layers: Selector for the layers; None picks the deepest layer of the architecture's
            default selection. Ignored with ``objective``.
        channels: The channels of each layer, as ``0-15`` or ``3,7,9-11``.
        objective: Class logits to maximize instead (``207`` or ``1,5-7``): channels of the
            model's output; its output dimensions when the model gives features, not class
            scores (see :func:`actviz.optimize.probe.reads_classes`).
        neuron: Maximize each channel's centre unit instead of its spatial mean.
        steps: Adam steps per image.
        size: Side of the square images in pixels.
        seed: Seeds the initial images and the random transforms.
        lr: Adam's learning rate.
        batch_size: Channels optimized together in one batch (GPU memory grows with it).
        out: Output folder; gets ``optimize.json``, ``optimize/`` and the report page.
        report: Write the HTML page.
        overwrite: Replace the results of an earlier optimize in ``out``.
        load: How the model is built (as for ``run``).
    """

    layers: str | None = None
    channels: str = "0-15"
    objective: str | None = None
    neuron: bool = False
    steps: int = 512
    size: int = 224
    seed: int = 0
    lr: float = 0.05
    batch_size: int = 16
    out: Path = Path("actviz-out")
    report: bool = True
    overwrite: bool = False
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= _MAX_STEPS:
            raise UsageError(f"--steps must be between 1 and {_MAX_STEPS}, not {self.steps}")
        if not _MIN_SIZE <= self.size <= _MAX_SIZE:
            raise UsageError(f"--size must be {_MIN_SIZE} to {_MAX_SIZE} pixels, not {self.size}")
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be 1 or more, not {self.batch_size}")
        if not self.lr > 0:
            raise UsageError(f"the learning rate must be above 0, not {self.lr}")
        self.channel_list()

    def channel_list(self) -> list[int]:
        """The channels (or classes, with ``objective``) to optimize, in order."""
        if self.objective is not None:
            return parse_channels(self.objective)
        return parse_channels(self.channels)

    @classmethod
    def from_keywords(cls, **keywords: Any) -> OptimizeOptions:
        """Build the options from flat keywords, as ``actviz.optimize(..., steps=64)`` takes
        them.

        Raises:
            TypeError: For a keyword no group has, naming the closest one.
        """
        return from_flat(cls, {"load": LoadOptions}, keywords, caller="optimize")
