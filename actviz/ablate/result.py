"""What ablate returns: the tables it found and the files it wrote, shown as a card in a
notebook."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.ablate.tables import ranked
from actviz.cards.ablate import ablate_card

__all__ = ["RECORD", "AblateResult"]

RECORD = "ablate.json"


@dataclass
class AblateResult:
    """What ``ablate`` found and wrote.

    Attributes:
        out: The output folder.
        record: ``ablate.json``.
        model: The model's name.
        layer: The layer whose output was edited.
        mode: The mode (``zero``, ``scale:0.5``, ...).
        labels: Where the classes came from: ``folders``, ``csv`` or ``agreement``.
        ablations: Per ablation its name, coordinates, overall figures and flow.
        classes: The per-class table: one row per ablation and class (``ablation``,
            ``class``, ``n``, ``acc_before``, ``acc_after``, ``balanced_acc_before``,
            ``balanced_acc_after``, ``dlogit``).
        curves: For a sweep, per class the accuracy as its N most and least important units
            are removed together (ranked on one part of the folder, measured on the rest).
        cases: The most affected images drawn with their CAM before and after.
        pictures: Other pictures written (``classes``, ``curves``), by kind.
        images: Images scored.
        failed: ``(image, reason)`` of those that could not be read.
        random_weights: The model's weights were random.
        weights: The model's weights record.
        warning: The random-weights warning, when one was given.
        fail_on: ``--fail-on``'s rule and the classes that crossed it (None without it).
        seconds: Wall time.
        device: Where the model ran.
        table: ``ablate.parquet``, one row per image and ablation.
        report: ``ablate.html``.
        skipped: Non-image files skipped in folders, with the reason.
        warnings: Every warning given.
    """

    out: Path
    record: Path
    model: str
    layer: str
    mode: str
    labels: str
    ablations: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    curves: list[dict[str, Any]]
    cases: list[dict[str, Any]]
    pictures: dict[str, str]
    images: int
    failed: list[tuple[str, str]]
    random_weights: bool
    weights: Any
    warning: str | None
    fail_on: dict[str, Any] | None
    seconds: float
    device: str
    table: Path | None = None
    report: Path | None = None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def ranked(self) -> list[dict[str, Any]]:
        """The ablations, the one that lost most images first (then the largest drop of the
        labels' logits, then the order given): the one the pictures show leads."""
        return [self.ablations[i] for i in ranked(self.ablations)]

    @property
    def crossed(self) -> list[dict[str, Any]]:
        """The classes that crossed ``--fail-on``, worst first."""
        return list((self.fail_on or {}).get("crossed") or [])

    def rows(self, ablation: str | None = None) -> list[dict[str, Any]]:
        """The per-class table of one ablation (the first when None)."""
        name = ablation or (self.ablations[0]["name"] if self.ablations else None)
        return [row for row in self.classes if row["ablation"] == name]

    def __repr__(self) -> str:

        return ablate_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return ablate_card(self).html()
