"""What ``top_images`` returns: the files it wrote and a summary per layer, as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.cards import top_images_card

if TYPE_CHECKING:
    from actviz.models import WeightsInfo

__all__ = ["LayerSummary", "TopImagesResult"]


@dataclass(frozen=True)
class LayerSummary:
    """One layer at a glance.

    Attributes:
        key: The capture key.
        channels: Channels ranked.
        dead: Channels never above zero over the whole folder (0 where not judged).
        dead_judged: False for outputs with one signed score per channel (logits, pooled
            features), whose channels are never called dead.
        selective_channel: The channel whose top images most share one predicted class (the
            lowest index on a tie); None for a model without classes.
        selective_class: That class's index.
        selective_label: Its name, when the model has category names.
        selective_count: How many of that channel's top images the model predicted as it.
        top_count: How many top images that channel has.
        overview: The overview picture, relative to the output folder.
        unit: What a ranked unit is: ``channel``, or ``feature`` of a dictionary (``--sae``).
    """

    key: str
    channels: int
    dead: int
    dead_judged: bool = True
    selective_channel: int | None = None
    selective_class: int | None = None
    selective_label: str | None = None
    selective_count: int = 0
    top_count: int = 0
    overview: str | None = None
    unit: str = "channel"


@dataclass
class TopImagesResult:
    """Everything a ``top-images`` run did.

    Attributes:
        model: The model as given.
        weights: Which weights it ran with.
        device: Where it ran.
        selector: The layer selector used.
        k: Images kept per channel.
        score: ``max`` or ``mean``.
        out: The output folder.
        json: ``top-images.json``.
        report: The report's index page, or None.
        images: Images scored (this run and the earlier one it resumed).
        reused: Of those, images an earlier interrupted run had scored (``--resume``).
        failed: Images that could not be read, with the reason: the first 100 by path.
        skipped: Files in the folders that are not images, with the reason.
        layers: One summary per ranked layer, in capture order.
        unranked: Selected outputs that cannot be read as maps, with the reason.
        warnings: What went wrong without stopping the run.
        seconds: Wall time.
        document: What ``top-images.json`` holds.
        failed_count: How many images could not be read (all of them).
    """

    model: str
    weights: WeightsInfo
    device: str
    selector: str
    k: int
    score: str
    out: Path
    json: Path
    report: Path | None
    images: int
    reused: int
    failed: list[tuple[Path, str]]
    skipped: list[tuple[Path, str]]
    layers: list[LayerSummary]
    unranked: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    document: dict[str, Any] = field(default_factory=dict)
    failed_count: int = 0

    def __repr__(self) -> str:

        return top_images_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return top_images_card(self).html()
