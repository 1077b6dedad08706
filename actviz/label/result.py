"""What ``actviz label`` returns: the labels of every layer, the concepts, and the files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.cards.concepts import label_card

__all__ = ["RECORD", "LabelResult", "LayerResult"]

RECORD = "labels.json"


@dataclass(frozen=True)
class LayerResult:
    """One layer's labels.

    Attributes:
        key: The capture key (``layer4``, ``layer1.0.relu:2``).
        units: How many units were labelled or not.
        unit: ``channel``, or ``feature`` for a sparse dictionary's features.
        labelled: Units with at least one label.
        records: Per unit its record (``unit``, ``label`` or None, ``score``, ``metric``,
            ``p``, ``q``, ``positives``, ``labels``, ``sheet``).
        page: Its page, relative to the output folder (None without pages).
        chart: Its chart, likewise.
    """

    key: str
    units: int
    unit: str
    labelled: int
    records: list[dict[str, Any]]
    page: str | None = None
    chart: str | None = None

    def labels(self) -> dict[int, str]:
        """Unit -> its label, for the labelled units."""
        return {int(r["unit"]): str(r["label"]) for r in self.records if r["label"] is not None}


@dataclass
class LabelResult:
    """What ``label`` found and wrote.

    Attributes:
        model: The model's name.
        out: The output folder.
        record: ``labels.json``.
        metric: What ranks and tests the labels (``auprc``; ``iou`` ranks with masks).
        source: Where the concepts came from (``tags``, ``classes``, ``masks``, ``clip``).
        concepts: Per concept: ``concept``, ``positives``, ``negatives``, ``tested`` (or why
            not), and its learnability.
        layers: Per layer its labels.
        images: Images scored; ``failed``: those that could not be, with why.
        random_weights: The model's weights were random: labels of an untrained model.
        weights: The weights record.
        report: ``label.html`` (None when not written).
        skipped: Non-image files of the folder, with the reason.
        warnings: Every warning given.
        reused: Images an earlier run scored, taken from its journal (``--resume``).
        seconds: Wall time.
        device: Where the model ran.
        alpha: The false-discovery rate.
    """

    model: str
    out: Path
    record: Path
    metric: str
    source: str
    concepts: list[dict[str, Any]]
    layers: list[LayerResult]
    images: int
    failed: list[dict[str, Any]]
    random_weights: bool
    weights: Any
    report: Path | None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reused: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    alpha: float = 0.05

    def __repr__(self) -> str:

        return label_card(self).text()

    def _repr_html_(self) -> str:

        return label_card(self).html()
