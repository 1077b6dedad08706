"""What cam-eval returns, and the state every batch shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.cam_eval.maps import LayerShape
from actviz.cam_eval.metrics import Protocol
from actviz.cam_eval.options import CamEvalOptions
from actviz.cards import cam_eval_card

if TYPE_CHECKING:
    from torch import nn

    from actviz.gradients.attribution import AttributionJob
    from actviz.models import LoadedModel

__all__ = ["RECORD", "CamEvalResult"]

RECORD = "cam-eval.json"


@dataclass
class CamEvalResult:
    """What ``cam-eval`` found and wrote.

    Attributes:
        out: The output folder.
        record: ``cam-eval.json``.
        layer: The layer the maps were computed at.
        methods: The methods scored; ``summary`` also holds the baselines.
        summary: Per map name: metrics with intervals, verdicts against baselines, sanity.
        images: Every image's record (scores per map, sanity correlations, or its error).
        random_weights: The model's weights were random.
        seconds: Wall time.
        device: Where the model ran.
        chart, report: ``curves.png`` and ``cam-eval.html`` (None when not written).
        skipped: Non-image files skipped in folders, with the reason.
        warnings: Every warning given.
        reused: Images an earlier run scored, taken from its ledger (``--resume``).
        model: The model, as the command names it.

    In a notebook it shows itself as a card (``_repr_html_``): every map's scores, what it
    beats, the sanity check, and the curves.
    """

    out: Path
    record: Path
    layer: str
    methods: list[str]
    summary: dict[str, Any]
    images: list[dict[str, Any]]
    random_weights: bool
    seconds: float
    device: str
    chart: Path | None = None
    report: Path | None = None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reused: int = 0
    model: str = ""

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The images that could not be read or scored."""
        return [r for r in self.images if r.get("status") != "ok"]

    def __repr__(self) -> str:

        return cam_eval_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return cam_eval_card(self).html()


@dataclass
class EvalState:
    """What every batch needs."""

    opts: CamEvalOptions
    loaded: LoadedModel
    layer: str
    shape: LayerShape
    protocol: Protocol
    stages: list[str]
    twins: list[nn.Module]
    rels: dict[str, str]
    scorer: nn.Module | None = None
    """The model the perturbed images go through: the model itself, or on a CPU a
    channels-last copy of it (the same numbers to float rounding, several times faster)."""
    channels_last: bool = False
    job: AttributionJob | None = None
    """How the attribution methods run (model, input and targets filled in per batch); None
    when only CAMs are scored."""
