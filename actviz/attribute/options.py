"""The options of ``actviz attribute``, as one frozen dataclass built once and checked when
built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.command.options import COMMON_GROUPS, ExecutionOptions, LoadOptions
from actviz.errors import UsageError
from actviz.gradients.attribution import AttributionSettings
from actviz.gradients.registry import map_methods

__all__ = ["DEFAULT_METHODS", "GROUPS", "AttributeOptions"]

#: The method drawn when none is named.
DEFAULT_METHODS = ("ig",)
#: The option groups :func:`actviz.attribute` spreads flat keywords into: the shared ones and
#: the methods' settings (``steps=64`` goes to ``settings``).
GROUPS: dict[str, type[Any]] = {**COMMON_GROUPS, "settings": AttributionSettings}


@dataclass(frozen=True)
class AttributeOptions:
    """Everything ``actviz attribute`` takes besides the model and the inputs.

    Attributes:
        methods: Attribution methods, each drawn per image (``ig``, ``smoothgrad``,
            ``gradxinput``, ``lrp``, ``rollout``, ``grad-rollout``: the attribution rows of
            :data:`actviz.gradients.registry.MAP_METHODS`).
        target: The class explained: ``top1`` (each image its own most likely class), a class
            index or a class name.
        out: Output folder: ``attribute.json``, ``attribute.html``, a folder per image.
        save_tensors: Also write each attribution, ``(C, H, W)``, and the model's input as it
            saw it, as ``.npy`` beside its picture.
        alpha: Weight of the map's colours over the input in the overlay.
        report: Write ``attribute.html``.
        settings: How the methods run (steps, baseline, samples, noise, seed, composite,
            head fusion, discard ratio).
        load: How the model is built.
        execution: Batch size (rows per forward and backward: IG's steps and SmoothGrad's
            copies go through the model this many at a time), decoding workers,
            channels-last, resume and overwrite.
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    target: str = "top1"
    out: Path = Path("actviz-attribute")
    save_tensors: bool = False
    alpha: float = 0.5
    report: bool = True
    settings: AttributionSettings = field(default_factory=AttributionSettings)
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        chosen = map_methods(self.methods, "--method", example="ig", kind="attribution")
        object.__setattr__(self, "methods", chosen)
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "target", str(self.target))
        if not (math.isfinite(self.alpha) and 0 <= self.alpha <= 1):
            raise UsageError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.execution.engine != "local":
            raise UsageError("attribute runs on the local engine; drop --engine ray")
        if self.execution.amp:
            raise UsageError(
                "attribute takes no --amp: its axioms (IG's completeness) need full precision"
            )
