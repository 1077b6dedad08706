"""A training run while it goes: the dictionaries (one per seed), their trainer, and where
the pass over the images is."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.dictionary import SparseDictionary
from actviz.sae.metrics import stability
from actviz.sae.options import SaeOptions, Schedule, Sizes
from actviz.sae.state import Position
from actviz.sae.train import Trainer, normalisation

if TYPE_CHECKING:
    import torch

    from actviz.top_images.plan import LayerPlan

__all__ = ["Run"]


@dataclass
class Run:
    """The dictionaries while they train, their trainer, and where the pass is."""

    opts: SaeOptions
    plan: LayerPlan
    sizes: Sizes
    device: Any
    settings: dict[str, Any]
    schedule: Schedule
    saes: list[SparseDictionary] | None = None
    trainer: Trainer | None = None
    position: Position = field(default_factory=Position)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    saved: float = field(default_factory=time.monotonic)
    _adam: dict[str, Any] | None = None

    @property
    def features(self) -> int:
        """The number of features of each dictionary."""
        return self.sizes.features

    @property
    def k(self) -> int:
        """Features active per vector."""
        return self.sizes.k

    @property
    def trained_images(self) -> int:
        """The training images that gave vectors: those that failed to read left out."""
        return int(self.settings["images"]) - len(self.failed)

    def resume(self, state: Any) -> None:
        if state is None:
            return
        saes, adam, position = state
        self.saes, self.position, self._adam = saes, position, adam
        self._start_trainer()

    def _start_trainer(self) -> None:
        assert self.saes is not None
        lr = self.opts.lr or SparseDictionary.default_lr(self.features)
        self.trainer = Trainer(self.saes, lr)
        self.trainer.steps, self.trainer.tokens = self.position.steps, self.position.tokens
        self.trainer.running_fve = self.position.running_fve
        if self._adam:
            self.trainer.restore(self._adam)

    def finished(self) -> bool:
        if self.opts.tokens is not None:
            return self.position.tokens >= self.opts.tokens
        return self.position.epoch >= self.schedule.passes

    def feed(self, vectors: torch.Tensor) -> None:
        """Train every dictionary on shuffled ``vectors``, a batch at a time (the first
        vectors ever fed fix the normalisation and start the dictionaries)."""
        if self.saes is None:
            mean, scale = normalisation(vectors)
            self.saes = [
                SparseDictionary.initial(
                    self.plan.channels,
                    self.features,
                    self.k,
                    seed=self.opts.seed + i,
                    mean=mean,
                    scale=scale,
                    activation=self.opts.kind,
                )
                for i in range(self.opts.seeds)
            ]
            self._start_trainer()
        assert self.trainer is not None
        size = self.schedule.batch
        for start in range(0, vectors.shape[0], size):
            if self.finished():
                return
            self.trainer.step(vectors[start : start + size])
            self.position.steps = self.trainer.steps
            self.position.tokens = self.trainer.tokens
            self.position.running_fve = self.trainer.running_fve

    def pass_fve(self) -> float | None:
        """The first dictionary's figure over the pass that just ended."""
        return self.trainer.pass_fve() if self.trainer is not None else None

    def adam(self) -> dict[str, Any]:
        return self.trainer.state() if self.trainer is not None else {}

    def stability(self) -> tuple[Any, list[float]] | None:
        """Per feature of the first dictionary, its stability across the seeds, kept with
        its figures; None for one seed."""
        if self.saes is None or len(self.saes) < 2:
            return None

        scores, means = stability([s.w_dec for s in self.saes])
        self.saes[0].per_feature["stability"] = scores
        return scores, means
