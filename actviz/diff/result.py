"""What a diff found, as data and as ``diff.json``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.cards import diff_card
from actviz.command.head import json_head
from actviz.command.session import weights_record

if TYPE_CHECKING:
    from actviz.models.registry import WeightsInfo
    from actviz.results import ImageResult

__all__ = ["DiffPicture", "DiffResult", "LayerDiff", "ModelSide", "diff_record"]

#: Said in ``diff.json`` about the CKA estimator.
CKA_ESTIMATOR = (
    "linear CKA, features = each image's activation flattened, float64; minibatch debiased "
    "HSIC (Song et al. 2012; Nguyen et al. 2021): sum over groups of >= 4 images of "
    "HSIC_1(K,L) / sqrt(sum HSIC_1(K,K) * sum HSIC_1(L,L)); the biased estimator only when "
    "the whole folder has fewer than 4 images"
)
#: Said in ``diff.json``: the minibatch estimator's groups follow the batches.
CKA_BATCHES = (
    "the groups are the batches (a batch of fewer than 4 images waits for the next), so CKA "
    "depends on --batch-size: compare CKA values computed with the same batch size"
)
#: A layer whose mean ``||B - A|| / ||A||`` is above this has changed (``first_changed``):
#: a pure scaling keeps the cosine at 1 and shows only here.
REL_L2_CHANGED = 1e-3
#: Said in ``diff.json`` where CKA is undefined.
CKA_UNDEFINED = (
    "where a layer does not vary across the images on one side, CKA is 0/0: cka is then 1.0 "
    "if B equals A up to numerical noise (||B - A|| <= 1e-6 ||A||), else 0.0, and the layer's "
    "cka_defined is false"
)


@dataclass(frozen=True)
class ModelSide:
    """One of the two models compared."""

    model: str
    weights: WeightsInfo
    warning: str | None = None
    """The warning given because its weights came out random."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """The model's source, library versions and preprocessing (``LoadedModel.record()``)."""

    def describe(self) -> dict[str, Any]:
        described = {"model": self.model, "weights": weights_record(self.weights, self.warning)}
        if self.info:
            described["model_info"] = dict(self.info)
        return described

    @property
    def label(self) -> str:
        """Short: ``resnet18 a.pt``, ``resnet18 (random)``."""
        w = self.weights
        if w.source == "checkpoint" and w.name:
            return f"{self.model} {Path(w.name).name}"
        if w.random:
            return f"{self.model} (random)"
        if w.source == "pretrained" and w.name:
            return f"{self.model} {w.name.split('.')[-1]}"
        return self.model


@dataclass(frozen=True)
class LayerDiff:
    """How B's output of one layer compares with A's over every image.

    Attributes:
        name: The capture key (``layer1.0.conv1``, ``layer1.0.relu:2``).
        module, module_type: The module it comes from.
        cka: Linear CKA over the folder; None for two images (one pair has no CKA).
        cka_defined: False when ``cka`` stands in for 0/0 (see :data:`CKA_UNDEFINED`).
        cosine: Mean per-image cosine similarity; None when the shapes differ.
        rel_l2: Mean per-image ``||B - A|| / ||A||``; None when the shapes differ.
        shape_a, shape_b: Per-image output shapes.
        note: Anything unusual (undefined CKA, images left out, shapes that differ).
    """

    name: str
    module: str
    module_type: str
    cka: float | None
    cka_defined: bool
    cosine: float | None
    rel_l2: float | None
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    note: str | None = None

    def similarity(self, metric: str) -> float | None:
        """The value of ``metric`` (``cka`` or ``cosine``)."""
        return self.cka if metric == "cka" else self.cosine

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cka": _number(self.cka),
            "cosine": _number(self.cosine),
            "rel_l2": _number(self.rel_l2),
            "cka_defined": self.cka_defined,
            "module": self.module,
            "module_type": self.module_type,
            "shape_a": list(self.shape_a) if self.shape_a else None,
            "shape_b": list(self.shape_b) if self.shape_b else None,
            "note": self.note,
        }


@dataclass(frozen=True)
class DiffPicture:
    """One difference picture: A, B and B - A of one layer for one image (or image pair)."""

    image: str
    layer: str
    file: str
    channels: tuple[int, ...]
    channels_total: int
    panels: dict[str, list[int]]
    diff_range: float
    size: tuple[int, int] = (0, 0)


@dataclass
class DiffResult:
    """Everything a diff did, as written to ``diff.json``.

    Attributes:
        mode: ``models`` (two models over the same images) or ``images`` (two images through
            one model).
        a, b: The two models (the same one in ``images`` mode).
        first_divergent: The first layer, in depth order, whose ``metric`` is below
            ``threshold``; None when none is.
        layers: Every compared layer in depth order.
        images: Per input image: its status (``ok`` or ``failed``).
    """

    mode: Literal["models", "images"]
    a: ModelSide
    b: ModelSide
    selector: str
    metric: str
    threshold: float
    layers: list[LayerDiff]
    first_divergent: str | None
    images: list[ImageResult]
    out: Path
    record: Path
    device: str
    seconds: float
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    pictures: list[DiffPicture] = field(default_factory=list)
    pictured: int = 0
    chart: Path | None = None
    report: Path | None = None
    warnings: list[str] = field(default_factory=list)
    cka: dict[str, Any] = field(default_factory=dict)
    first_changed: str | None = None
    """The first layer, in depth order, whose relative L2 is above :data:`REL_L2_CHANGED`."""

    def __repr__(self) -> str:

        return diff_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return diff_card(self).html()

    @property
    def failed(self) -> list[ImageResult]:
        """Images that could not be read."""
        return [i for i in self.images if i.status == "failed"]

    def lowest(self, count: int = 5) -> list[LayerDiff]:
        """The ``count`` layers least similar by ``metric``, least similar first."""
        scored = [layer for layer in self.layers if layer.similarity(self.metric) is not None]
        scored.sort(key=lambda layer: layer.similarity(self.metric) or 0.0)
        return scored[:count]


def first_divergent(layers: list[LayerDiff], metric: str, threshold: float) -> str | None:
    """The first layer in depth order whose ``metric`` is below ``threshold``."""
    for layer in layers:
        value = layer.similarity(metric)
        if value is not None and value < threshold:
            return layer.name
    return None


def first_changed(layers: list[LayerDiff], threshold: float = REL_L2_CHANGED) -> str | None:
    """The first layer in depth order whose mean relative L2 difference is above
    ``threshold``: where B starts to differ at all, a scaling included."""
    for layer in layers:
        if layer.rel_l2 is not None and layer.rel_l2 > threshold:
            return layer.name
    return None


def diff_record(result: DiffResult) -> dict[str, Any]:
    """``diff.json``: JSON-ready, layers in depth order."""
    out = result.out
    sides = {"mode": result.mode, "a": result.a.describe(), "b": result.b.describe()}
    return {
        **json_head(infos=[result.a.info, result.b.info], device=result.device, model=sides),
        "selector": result.selector,
        "metric": result.metric,
        "threshold": result.threshold,
        "first_divergent": result.first_divergent,
        "first_changed": {"layer": result.first_changed, "rel_l2_above": REL_L2_CHANGED},
        "layers": [layer.describe() for layer in result.layers],
        "cka": result.cka,
        "inputs": [
            {"path": str(i.path), "status": i.status, "error": i.error} for i in result.images
        ],
        "skipped": [{"path": str(p), "reason": r} for p, r in result.skipped],
        "pictured_images": result.pictured,
        "pictures": [
            {
                "image": p.image,
                "layer": p.layer,
                "file": p.file,
                "channels": list(p.channels),
                "channels_total": p.channels_total,
                "size": list(p.size),
                "panels": p.panels,
                "diff_range": _number(p.diff_range),
            }
            for p in result.pictures
        ],
        "chart": _rel(result.chart, out),
        "report": _rel(result.report, out),
        "warnings": result.warnings,
        "seconds": round(result.seconds, 3),
    }


def _rel(path: Path | None, out: Path) -> str | None:
    if path is None:
        return None
    try:
        return path.relative_to(out).as_posix()
    except ValueError:
        return str(path)


def _number(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None
