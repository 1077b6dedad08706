"""The options of ``actviz sae``: one frozen dataclass built once and passed typed. Imports no
torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError

__all__ = ["SaeOptions", "Schedule"]

Kind = Literal["topk", "batchtopk"]

#: Default vectors per training step (``sae_batch`` None on a folder that gives enough).
BATCH = 1024
#: The automatic batch is never below this.
SMALLEST_BATCH = 64
#: The automatic batch is small enough that one epoch gives at least this many steps.
STEPS_PER_EPOCH = 16
#: Default least number of optimizer steps when training by epochs.
MIN_STEPS = 500


@dataclass(frozen=True)
class SaeOptions:
    """Everything ``actviz sae`` takes besides the model and the inputs.

    Attributes:
        layers: Selector naming the one layer to train on; None: the deepest layer of the
            architecture's default selection.
        out: Output folder: ``sae.safetensors``, ``sae.json``, the feature pages.
        features: Number of features; None: ``expansion`` times the layer's channels.
        expansion: Features per channel when ``features`` is None.
        k: Features active per vector.
        kind: ``topk`` (k per vector) or ``batchtopk`` (k per vector on average over a batch).
        epochs: Passes over the training images.
        tokens: A budget of training vectors instead of ``epochs`` (passes until it is spent).
        lr: Adam's learning rate; None scales it with the number of features.
        seed: Seed of the first dictionary's initialisation, the held-out split and the order.
        seeds: Dictionaries trained together on the same vectors (seed, seed + 1, ...); two
            or more give each feature a stability score.
        held_out: Share of the images kept out of training, for the quality figures.
        prefix_tokens: Also train on a ViT's class and register tokens (left out by
            default, as the grids leave them out); the feature maps stay the patches'.
        sae_batch: Vectors per training step; None: 1024, or fewer for a small folder so that
            an epoch gives at least :data:`STEPS_PER_EPOCH` steps (not below 64).
        min_steps: Optimizer steps at least, when training by ``epochs``: a small folder
            gets more passes (over the vectors kept from its first epoch when they fit) until
            they are reached. 0: exactly ``epochs`` passes.
        buffer: Vectors the shuffle buffer holds at most.
        pages: Write the feature pages (top images per feature, the index).
        top: Top images per feature on its page.
        load: How the model is built.
        execution: Batch size, decoding workers, resume and overwrite.
    """

    layers: str | None = None
    out: Path = Path("actviz-out")
    features: int | None = None
    expansion: int = 8
    k: int = 32
    kind: Kind = "topk"
    epochs: int = 4
    tokens: int | None = None
    lr: float | None = None
    seed: int = 0
    seeds: int = 1
    held_out: float = 0.1
    prefix_tokens: bool = False
    sae_batch: int | None = None
    min_steps: int = MIN_STEPS
    buffer: int = 65536
    pages: bool = True
    top: int = 9
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        check_choices(self)
        if self.features is not None and self.features < 2:
            raise UsageError(f"--features must be at least 2, not {self.features}")
        if self.expansion < 1:
            raise UsageError(f"--expansion must be at least 1, not {self.expansion}")
        if self.k < 1:
            raise UsageError(f"--k must be at least 1, not {self.k}")
        if self.features is not None and self.k >= self.features:
            raise UsageError(
                f"--k {self.k} must be below --features {self.features}; lower --k or raise "
                "--features"
            )
        if self.epochs < 1 or (self.tokens is not None and self.tokens < 1):
            raise UsageError("--epochs and --tokens must be at least 1")
        if self.lr is not None and not 0 < self.lr < 1:
            raise UsageError(f"--lr must be between 0 and 1, not {self.lr}")
        if not 1 <= self.seeds <= 8:
            raise UsageError(f"--seeds must be 1 to 8 dictionaries, not {self.seeds}")
        if not 0 <= self.held_out < 1:
            raise UsageError(f"--held-out must be a share from 0 to below 1, not {self.held_out}")
        batch = self.sae_batch if self.sae_batch is not None else BATCH
        if batch < 8 or self.buffer < 2 * batch:
            raise UsageError(
                "--sae-batch must be at least 8 and --buffer at least twice --sae-batch "
                f"(by default {BATCH})"
            )
        if self.min_steps < 0:
            raise UsageError(f"--min-steps must be 0 or more, not {self.min_steps}")
        if not 1 <= self.top <= 100:
            raise UsageError(f"--top must be 1 to 100 images per feature, not {self.top}")

    def settings(self) -> dict[str, Any]:
        """What an interrupted run must have used for ``--resume`` to continue it."""
        return {
            "features": self.features,
            "expansion": self.expansion,
            "k": self.k,
            "kind": self.kind,
            "lr": self.lr,
            "seed": self.seed,
            "seeds": self.seeds,
            "held_out": self.held_out,
            "prefix_tokens": self.prefix_tokens,
            "sae_batch": self.sae_batch,
            "min_steps": self.min_steps,
            "buffer": self.buffer,
            "in_chans": self.load.in_chans,
        }

    def schedule(self, per_epoch: int) -> Schedule:
        """The batch and the number of passes for ``per_epoch`` training vectors an epoch."""
        batch = self.sae_batch
        if batch is None:
            batch = min(BATCH, max(SMALLEST_BATCH, per_epoch // STEPS_PER_EPOCH))
        per_epoch = max(per_epoch, 1)
        if self.tokens is not None:
            return Schedule(batch, -(-self.tokens // per_epoch), self.epochs)
        # Each pass gives at least ceil(per_epoch / batch) steps (a partial batch is a step).
        steps = -(-per_epoch // batch)
        return Schedule(batch, max(self.epochs, -(-self.min_steps // steps)), self.epochs)


@dataclass(frozen=True)
class Schedule:
    """How the training runs: vectors per step, passes over the training images (more than
    the epochs asked when the folder is too small for ``min_steps``), and the epochs asked."""

    batch: int
    passes: int
    asked: int
