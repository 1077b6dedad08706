"""What ``actviz sae`` returns, and what it reports per finished image."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.cards import dictionary_card

if TYPE_CHECKING:
    from actviz.models import WeightsInfo

__all__ = ["SaeProgress", "SaeResult"]


@dataclass(frozen=True)
class SaeProgress:
    """One training image done: the epoch, and the running fraction of variance explained
    of the first dictionary (None before its first step)."""

    epoch: int
    fve: float | None


@dataclass
class SaeResult:
    """A trained dictionary: where it is, its size, and its quality on the held-out images.

    Attributes:
        quality: ``sae.json``'s ``metrics``: ``fve``, ``l0``, ``dead_share``,
            ``dense_share``, ``top1_changed_share`` and the counts behind them.
        stability: With several seeds, per other seed the mean cosine of matched features.
        index: The feature index page, when pages were written.
        train_seconds: Seconds spent training (forward passes included), over every run
            that ``--resume`` continued.
    """

    model: str
    layer: str
    out: Path
    file: Path
    json: Path
    index: Path | None
    channels: int
    features: int
    k: int
    seeds: int
    images: int
    held_out: int
    steps: int
    tokens: int
    epochs: int
    train_seconds: float
    quality: dict[str, Any]
    stability: list[float] | None
    device: str
    weights: WeightsInfo
    warnings: list[str] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    seconds: float = 0.0
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def k_from(self) -> str:
        """``given``, or how the default k was chosen from the layer's width."""
        return str((self.document.get("sizes") or {}).get("k", "given"))

    def __repr__(self) -> str:

        return dictionary_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return dictionary_card(self).html()
