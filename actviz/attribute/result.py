"""What ``attribute`` returns (a card in a notebook), and the state every batch shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.attribute.options import AttributeOptions
from actviz.cards import attribute_card

if TYPE_CHECKING:
    import torch

    from actviz.models import LoadedModel, WeightsInfo

__all__ = ["LEDGER", "RECORD", "AttributeResult", "AttributeState"]

RECORD = "attribute.json"
LEDGER = "attribute.jsonl"


@dataclass
class AttributeResult:
    """What ``attribute`` found and wrote.

    Attributes:
        out: The output folder.
        record: ``attribute.json``.
        model: The model's name.
        weights: Its weights (``random`` when untrained).
        methods: The methods drawn.
        images: Every image's record: its target, and per method its picture, its tensor,
            its figures and its axiom (or its error).
        axioms: Per method: the axiom, the images checked and flagged, the worst value.
        random_weights: The model's weights were random.
        seconds: Wall time.
        device: Where the model ran.
        report: ``attribute.html`` (None when not written).
        skipped: Non-image files skipped in folders, with the reason.
        warnings: Every warning given (the random-weights one first when there is one).
        reused: Images an earlier run drew, taken from its ledger (``--resume``).
        weights_warning: The warning given because the weights came out random.
    """

    out: Path
    record: Path
    model: str
    weights: WeightsInfo
    methods: list[str]
    images: list[dict[str, Any]]
    axioms: dict[str, dict[str, Any]]
    random_weights: bool
    seconds: float
    device: str
    report: Path | None = None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reused: int = 0
    weights_warning: str | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The images that could not be read or attributed."""
        return [r for r in self.images if r.get("status") != "ok"]

    def pictures(self, method: str | None = None) -> list[Path]:
        """The pictures written (of one ``method``), in the images' order."""
        return [
            self.out / entry["picture"]
            for r in self.images
            if r.get("status") == "ok"
            for name, entry in (r.get("methods") or {}).items()
            if method is None or name == method
        ]

    def __repr__(self) -> str:

        return attribute_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return attribute_card(self).html()


@dataclass
class AttributeState:
    """What every batch needs."""

    opts: AttributeOptions
    loaded: LoadedModel
    rels: dict[str, str]
    folders: dict[str, str]
    random: bool
    baseline: torch.Tensor | None = None
    notes: list[str] = field(default_factory=list)
    """What the methods said once for the run (fused attention turned off, ...)."""
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per method, what its first batch recorded about how it ran."""
