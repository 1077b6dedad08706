"""The options of ``actviz sae``: one frozen dataclass built once and passed typed. Imports no
torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError

__all__ = ["SaeOptions", "Schedule", "Sizes", "default_expansion", "default_k"]

Kind = Literal["topk", "batchtopk"]

#: Default vectors per training step (``sae_batch`` None on a folder that gives enough).
BATCH = 1024
#: The automatic batch is never below this.
SMALLEST_BATCH = 64
#: The automatic batch is small enough that one epoch gives at least this many steps.
STEPS_PER_EPOCH = 16
#: Default least number of optimizer steps when training by epochs.
MIN_STEPS = 1000
#: The default k is the layer's width over this, from 1 to :data:`MAX_DEFAULT_K`: k as large
#: as the width cannot force a sparse code (every feature could be active at once), and on a
#: narrow layer the code is only sparse well below it.
K_SHARE = 8
#: The default k never exceeds this (Gao et al. 2024 train k 32 on GPT-2's 768 channels).
MAX_DEFAULT_K = 32
#: A k above this share of the width is said to be too dense to be sparse.
DENSE_SHARE = 0.25
#: The default expansion is the largest of these whose features each get at least
#: :data:`VECTORS_PER_FEATURE` of an epoch's training vectors.
EXPANSIONS = (8, 4, 2, 1)
VECTORS_PER_FEATURE = 16


def default_k(channels: int) -> int:
    """k for a layer of ``channels`` when none is given: an eighth of the width, 1 to 32."""
    return max(1, min(MAX_DEFAULT_K, channels // K_SHARE))


def default_expansion(channels: int, vectors: int) -> int:
    """Features per channel when neither ``features`` nor ``expansion`` is given: 8, or fewer
    when an epoch gives fewer than 16 training vectors per feature (a small folder cannot
    train 8 features a channel; they stay dead or fit the training vectors alone)."""
    for expansion in EXPANSIONS:
        if expansion * channels * VECTORS_PER_FEATURE <= vectors:
            return expansion
    return EXPANSIONS[-1]


@dataclass(frozen=True)
class Sizes:
    """The dictionary's size as trained, and where each number came from (for the summary
    and ``sae.json``).

    Attributes:
        features: Number of features.
        k: Features active per vector.
        k_from: ``given``, or how the default was chosen from the width.
        features_from: ``given`` (``--features`` or ``--expansion``), or how the default
            expansion was chosen from the training vectors.
        dense: Why k is too large a share of the width to give a sparse code; None when not.
    """

    features: int
    k: int
    k_from: str
    features_from: str
    dense: str | None = None


@dataclass(frozen=True)
class SaeOptions:
    """Everything ``actviz sae`` takes besides the model and the inputs.

    Attributes:
        layers: Selector naming the one layer to train on; None: the deepest layer of the
            architecture's default selection.
        out: Output folder: ``sae.safetensors``, ``sae.json``, the feature pages.
        features: Number of features; None: ``expansion`` times the layer's channels.
        expansion: Features per channel when ``features`` is None; None: 8, or fewer when
            an epoch gives fewer than 16 training vectors per feature
            (:func:`default_expansion`).
        k: Features active per vector; None: an eighth of the layer's width, 1 to 32
            (:func:`default_k`).
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
    expansion: int | None = None
    k: int | None = None
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
        if self.expansion is not None and self.expansion < 1:
            raise UsageError(f"--expansion must be at least 1, not {self.expansion}")
        if self.k is not None and self.k < 1:
            raise UsageError(f"--k must be at least 1, not {self.k}")
        if self.features is not None and self.k is not None and self.k >= self.features:
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

    def sizes(self, channels: int, vectors: int) -> Sizes:
        """The features and k for a layer of ``channels`` whose training images give
        ``vectors`` vectors an epoch: those given, or the defaults chosen from them."""
        if self.k is not None:
            k, k_from = self.k, "given"
        else:
            k = default_k(channels)
            k_from = f"default for {channels} channels (an eighth of them, 1 to {MAX_DEFAULT_K})"
        if self.features is not None:
            features, features_from = self.features, "given"
        elif self.expansion is not None:
            features, features_from = self.expansion * channels, "given"
        else:
            expansion = default_expansion(channels, vectors)
            features = expansion * channels
            features_from = (
                f"default expansion {expansion} (the largest of 8, 4, 2, 1 giving each feature "
                f"{VECTORS_PER_FEATURE} of the {vectors:,} vectors an epoch)"
            )
        dense = None
        if k > 1 and k > DENSE_SHARE * channels:
            dense = (
                f"k {k} is {k / channels:.0%} of {channels} channels: so many features active "
                f"at once cannot make a sparse code (the dictionary learns a dense one, and a "
                f"high variance explained hides it); lower -k (the default for this layer is "
                f"{default_k(channels)})"
            )
        return Sizes(features, k, k_from, features_from, dense)

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
