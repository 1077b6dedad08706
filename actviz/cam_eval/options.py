"""The options of ``actviz cam-eval``, as one frozen dataclass built once and checked when built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from actviz.command.options import ExecutionOptions, LoadOptions
from actviz.errors import UsageError
from actviz.gradients.attribution import AttributionSettings
from actviz.gradients.registry import map_methods

__all__ = ["DEFAULT_METHODS", "CamEvalOptions"]

#: The methods scored by default; Score-CAM (one forward per channel and image) on request.
DEFAULT_METHODS = ("gradcam", "gradcam++", "layercam", "eigencam")


@dataclass(frozen=True)
class CamEvalOptions:
    """Everything ``actviz cam-eval`` takes besides the model and the inputs.

    Attributes:
        methods: Methods to score: CAMs and attributions alike
            (:data:`actviz.gradients.registry.MAP_METHODS`).
        layers: Selector of the one layer the maps are computed at; None: the layer ``run
            --cam`` takes by default (the last whose positions reach the classifier).
        target: ``top1`` (each image its own most likely class), a class index or a name.
        out: Output folder: ``cam-eval.json``, ``curves.png``, ``cam-eval.html``, ``cases/``.
        steps: Points of each deletion and insertion curve after the first.
        sanity_blocks: Blocks re-initialised, one more at a time from the output down, for the
            sanity check (0: no sanity check).
        seed: Seed of the random-map baseline and of the re-initialised weights.
        chunk: Perturbed images per forward (0: 8 times the batch size).
        report: Write ``cam-eval.html`` and the pictures of the best and worst cases.
        attribution: How the attribution methods among ``methods`` run (their steps, baseline,
            samples, ...); SmoothGrad's noise is seeded with ``seed``.
        load: How the model is built.
        execution: Batch size, decoding workers, resume and overwrite.
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    layers: str | None = None
    target: str = "top1"
    out: Path = Path("actviz-cam-eval")
    steps: int = 32
    sanity_blocks: int = 3
    seed: int = 0
    chunk: int = 0
    report: bool = True
    attribution: AttributionSettings = field(default_factory=AttributionSettings)
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        methods = map_methods(self.methods, "--methods", example="gradcam,eigencam")
        object.__setattr__(self, "methods", methods)
        object.__setattr__(self, "out", Path(self.out))
        if not 2 <= self.steps <= 1000:
            raise UsageError(f"--steps must be between 2 and 1000, got {self.steps}")
        if self.sanity_blocks < 0 or self.chunk < 0:
            raise UsageError("--sanity-blocks and --chunk must be at least 0")
        if self.execution.engine != "local":
            raise UsageError("cam-eval runs on the local engine; drop --engine ray")

    @property
    def forward_chunk(self) -> int:
        """Perturbed images per forward."""
        return self.chunk or 8 * self.execution.batch_size
