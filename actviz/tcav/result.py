"""What ``actviz tcav`` returns: per concept and class its score over the runs, the random
vectors', the test, and where the concept vectors were saved."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.cards.concepts import tcav_card

__all__ = ["RECORD", "TcavResult"]

RECORD = "tcav.json"


@dataclass
class TcavResult:
    """What ``tcav`` found and wrote.

    Attributes:
        model: The model's name.
        out: The output folder.
        record: ``tcav.json``.
        layer: The capture key of the layer the vectors live in.
        cav: How the vectors were found (``fast``, ``linear``).
        runs: Vectors per concept (and random-vs-random ones).
        seed: Seed of the draws.
        concepts: Per concept: ``concept``, ``images``, ``per_run``, ``vector`` (its ``.npy``,
            relative to ``out``).
        scores: Per concept and class: ``concept``, ``target``, ``target_name``, ``score``
            (the mean TCAV score over the runs), ``spread`` (their standard deviation),
            ``scores``, ``random``, ``random_spread``, ``random_scores``, ``p``, ``q``,
            ``significant``.
        vectors: ``cavs/cavs.safetensors``: every run's vector of every concept.
        images: Input images scored (their gradients), over every class.
        random_weights: The model's weights were random.
        weights: The weights record.
        report: ``tcav.html``; ``chart``: ``tcav.png`` (None when not written).
        failed: Images that could not be read, with the set they belong to.
        warnings: Every warning given.
        reused: Images an earlier run read, taken from its journal (``--resume``).
        seconds: Wall time.
        device: Where the model ran.
    """

    model: str
    out: Path
    record: Path
    layer: str
    cav: str
    runs: int
    seed: int
    concepts: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    vectors: Path
    images: int
    random_weights: bool
    weights: Any
    report: Path | None = None
    chart: Path | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reused: int = 0
    seconds: float = 0.0
    device: str = "cpu"

    def vector(self, concept: str) -> Path:
        """The ``.npy`` of a concept's vector (its runs' mean direction, unit length): what
        ``ablate --direction`` takes."""
        for row in self.concepts:
            if row["concept"] == concept:
                return self.out / str(row["vector"])
        raise KeyError(concept)

    def __repr__(self) -> str:

        return tcav_card(self).text()

    def _repr_html_(self) -> str:

        return tcav_card(self).html()
