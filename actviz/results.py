"""What a command produced, as data: per image and layer (a run keeps its images' records on
disk, in its ledger: :class:`~actviz.run.result.ImageRecords` reads them back)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "ImageResult",
    "LayerResult",
    "Prediction",
]


@dataclass(frozen=True)
class Prediction:
    """One of the top classes the model predicts for an image."""

    index: int
    label: str | None
    probability: float


@dataclass(frozen=True)
class LayerResult:
    """What was captured and drawn for one layer output of one image.

    ``pictures`` holds the files drawn of it by kind (``grid``, ``overlay``, ``gradient``,
    ``cam``, ``pca``: ``actviz.run.pictures.PICTURE_KINDS``); ``file`` is its grid, the same as
    ``pictures["grid"]``.
    """

    key: str
    module: str
    module_type: str
    call: int
    shape: tuple[int, ...]
    min: float
    max: float
    mean: float
    channels_shown: int
    channels_total: int
    file: str | None
    note: str | None = None
    kind: str = "output"
    layout: str | None = None
    tensor_file: str | None = None
    stats: dict[str, Any] | None = None
    gradient: dict[str, Any] | None = None
    channels: list[int] | None = None
    cam_note: str | None = None
    """Why the Grad-CAM map is all zero, when it is (``class: why; ...`` when only some of
    several classes' maps are); ``gradient["zero"]`` and ``gradient["note"]`` say the same
    of the gradient."""
    cam_method: str | None = None
    """The method of the layer's class activation map (``gradcam``, ``eigencam``, ...), when
    one was drawn."""
    pictures: Mapping[str, str] = field(default_factory=dict)
    prefix_tokens: int = 0
    """Prefix tokens (class, register) drawn in the band above each tile of the grid."""

    def __post_init__(self) -> None:
        # The grid is both the record's file and one of its pictures.
        if self.file is not None and "grid" not in self.pictures:
            object.__setattr__(self, "pictures", {"grid": self.file, **self.pictures})
        elif self.file is None and "grid" in self.pictures:
            object.__setattr__(self, "file", self.pictures["grid"])


@dataclass(slots=True)
class ImageResult:
    """The outcome for one input image.

    While a run works, each image's layers are filled in, recorded in the run's ledger and
    let go; what stays is this small stub with ``record``, the byte offset of its line there
    (:class:`ImageRecords` reads it back).
    """

    path: Path
    out_dir: PurePosixPath
    status: str = "ok"
    error: str | None = None
    size: tuple[int, int] | None = None
    layers: list[LayerResult] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    thumbnail: str | None = None
    gradient_flow: str | None = None
    note: str | None = None
    """What the model saw of an image it barely sees (a far-off aspect ratio, a tiny image)."""
    pictures: dict[str, str] = field(default_factory=dict)
    """Pictures of the whole input by kind (``optical_flow``: an optical-flow model's estimate at
    every iteration), relative to the output folder."""
    extras: dict[str, Any] = field(default_factory=dict)
    """What the model's family records of the image, by the keys its record has: a
    detector's ``detections``, ``detections_file``, ``detection_heads_file``,
    ``detection_heads`` and ``detection_cam_file`` (read as the attributes of those names);
    empty for other models."""
    record: int | None = None
    """The byte offset of this image's line in the run's ledger, once it has one."""

    def let_go(self) -> None:
        """Drop what the ledger now holds (layers, predictions, the family's extras): the stub
        stays small."""
        self.layers = []
        self.predictions = []
        self.extras = {}

    @property
    def detections(self) -> list[dict[str, Any]] | None:
        """A detector's detections at or above the score threshold: ``label``, ``name``,
        ``score``, ``box`` (``x1, y1, x2, y2`` in the model input's pixels); None for other
        models."""
        found: list[dict[str, Any]] | None = self.extras.get("detections")
        return found

    @property
    def detections_file(self) -> str | None:
        """``<image>/detections.png``, relative to the output folder."""
        return self._file("detections_file")

    @property
    def detection_heads_file(self) -> str | None:
        """``<image>/detection_heads.png`` (box features, mask logits, keypoint heatmaps of
        the first detections), relative to the output folder."""
        return self._file("detection_heads_file")

    @property
    def detection_heads(self) -> dict[str, list[int]] | None:
        """The shape of what each per-detection head gave for the image's detections (all
        the model returned): ``box features`` -> ``[N, 1024]``, ``mask logits`` ->
        ``[N, 91, 28, 28]``, ``keypoint heatmaps`` -> ``[N, 17, 56, 56]``."""
        shapes: dict[str, list[int]] | None = self.extras.get("detection_heads")
        return shapes

    @property
    def detection_cam_file(self) -> str | None:
        """``<image>/detection_cam.png`` (EigenCAM and one detection's Grad-CAM), relative to
        the output folder."""
        return self._file("detection_cam_file")

    def _file(self, key: str) -> str | None:
        value = self.extras.get(key)
        return None if value is None else str(value)
