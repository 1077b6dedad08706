"""What ``actviz atlas`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.cards import atlas_card

if TYPE_CHECKING:
    from actviz.models import WeightsInfo

__all__ = ["AtlasResult"]


@dataclass
class AtlasResult:
    """An atlas: where its files are and what it found.

    Attributes:
        model: The model's name (model A's with a second model).
        layer: The layer mapped.
        out: The output folder.
        record: ``atlas.json``.
        picture: ``atlas.png``.
        table: ``points.parquet``.
        report: ``atlas.html`` (None when not written).
        points: How many points were laid out (both models' with a second one).
        images: How many images gave points.
        grid: Cells per side.
        min_count: Cells with fewer points were dropped.
        cells: Each kept cell as ``atlas.json`` lists it (``cell``, ``count``, ``class``...).
        readout: Whether and where the layer reaches a linear readout (``atlas.json``'s).
        colour: How the points were coloured (``class``, ``pred``, ``unit:17``, ``none``).
        reduce: ``umap`` or ``pca``.
        weights: Model A's weights (random ones are said on the card first).
        weights_warning: The random-weights warning given about model A, if one was.
        against: Model B's name and weights with a second model, the ridge map's fit.
        failed: Images that could not be read, with the reason.
        skipped: Non-image files skipped in folders, with the reason.
        warnings: Every warning given.
        reused: Images whose points an earlier run kept (``--resume``).
        seconds: Wall time; ``forward_seconds``: of it, the forward part.
        device: Where the model ran.
    """

    model: str
    layer: str
    out: Path
    record: Path
    picture: Path
    table: Path
    report: Path | None
    points: int
    images: int
    grid: int
    min_count: int
    cells: list[dict[str, Any]]
    readout: dict[str, Any]
    colour: str
    reduce: str
    weights: WeightsInfo
    weights_warning: str | None = None
    against: dict[str, Any] | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reused: int = 0
    seconds: float = 0.0
    forward_seconds: float = 0.0
    device: str = "cpu"

    @property
    def random_weights(self) -> bool:
        """Whether model A's weights were random."""
        return bool(getattr(self.weights, "random", False))

    def __repr__(self) -> str:

        return atlas_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return atlas_card(self).html()
