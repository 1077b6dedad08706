"""What a command produced, as data: per image and layer (``actviz.run.manifest`` writes a run's
as ``manifest.json``), and the reporter it tells its progress to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from actviz.models.registry import WeightsInfo

__all__ = [
    "ImageResult",
    "LayerResult",
    "Prediction",
    "Reporter",
    "RunResult",
    "SilentReporter",
    "layer_notes",
]


class Reporter(Protocol):
    """Receives what a run wants a person to know while it works. Every method is optional
    in spirit: :class:`SilentReporter` ignores everything."""

    def warn(self, message: str) -> None:
        """A problem that does not stop the run (random weights, a layer that never ran)."""

    def start(self, total: int) -> None:
        """The run is about to process ``total`` images."""

    def advance(self, result: ImageResult) -> None:
        """One image is done (or failed)."""


class SilentReporter:
    """A reporter that ignores everything: the default for library use."""

    def warn(self, message: str) -> None:
        """Ignore."""

    def start(self, total: int) -> None:
        """Ignore."""

    def advance(self, result: ImageResult) -> None:
        """Ignore."""


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
    pictures: Mapping[str, str] = field(default_factory=dict)
    prefix_tokens: int = 0
    """Prefix tokens (class, register) drawn in the band above each tile of the grid."""

    def __post_init__(self) -> None:
        # The grid is both the record's file and one of its pictures.
        if self.file is not None and "grid" not in self.pictures:
            object.__setattr__(self, "pictures", {"grid": self.file, **self.pictures})
        elif self.file is None and "grid" in self.pictures:
            object.__setattr__(self, "file", self.pictures["grid"])


@dataclass
class ImageResult:
    """The outcome for one input image."""

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


@dataclass
class RunResult:
    """Everything a run did, as written to ``manifest.json``."""

    model: str
    weights: WeightsInfo
    device: str
    selector: str
    layers: list[str]
    out: Path
    images: list[ImageResult]
    skipped: list[tuple[Path, str]]
    seconds: float
    manifest: Path
    warnings: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    render: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    report: Path | None = None
    gradient_flow: Path | None = None
    pca: dict[str, Any] = field(default_factory=dict)
    """Capture key -> its principal components' record (``--view pca``)."""
    model_info: dict[str, Any] = field(default_factory=dict)
    """The model's source, name and the preprocessing actually used (``LoadedModel.record``)."""
    weights_warning: str | None = None
    """The warning given because the weights came out random (one of ``warnings``)."""

    @property
    def notes(self) -> list[str]:
        """What a person should know about the pictures (all-zero gradients and Grad-CAM
        maps, with the reason), each once, with the first image it was seen in."""
        seen: dict[str, str] = {}
        for result in self.images:
            for message in layer_notes(result):
                seen.setdefault(message, result.out_dir.as_posix())
        return [f"{message} (first in {where})" for message, where in seen.items()]

    @property
    def undrawable(self) -> dict[str, str]:
        """Layer outputs that could not be drawn, with the reason (first image's words)."""
        found: dict[str, str] = {}
        for result in self.images:
            for layer in result.layers:
                if layer.layout == "none" and layer.key not in found:
                    found[layer.key] = layer.note or "cannot be drawn"
        return found

    def flags(self, kinds: Iterable[str] | None = None) -> list[tuple[str, Any]]:
        """``(image folder, flag)`` for every anomaly flag of these kinds (all by default)."""
        if self.stats is None:
            return []
        from actviz.stats import FLAG_KINDS, find_flags

        return find_flags(self.stats, FLAG_KINDS if kinds is None else kinds)

    @property
    def failed(self) -> list[ImageResult]:
        """Images that could not be processed."""
        return [r for r in self.images if r.status == "failed"]

    @property
    def reused(self) -> list[ImageResult]:
        """Images an earlier run had completed (``--resume``)."""
        return [r for r in self.images if r.status == "reused"]

    @property
    def grids_written(self) -> int:
        """Number of activation grid PNGs written (one per layer output drawn)."""
        return sum(1 for r in self.images if r.status == "ok" for layer in r.layers if layer.file)

    @property
    def files_written(self) -> int:
        """Number of files written for the images this run drew: every per-layer picture
        (grids, overlays, gradient grids, Grad-CAMs, PCA views), saved tensors, input
        thumbnails and per-image gradient charts (the run's own files, such as the manifest,
        are not counted)."""
        count = 0
        for r in self.images:
            if r.status != "ok":
                continue
            count += r.thumbnail is not None
            count += r.gradient_flow is not None
            for layer in r.layers:
                count += len(layer.pictures) + (layer.tensor_file is not None)
        return count


def layer_notes(result: ImageResult) -> list[str]:
    """One image's notes on its pictures: each all-zero gradient or Grad-CAM map, and why;
    layers with the same note are named together."""
    found: dict[str, list[str]] = {}
    for layer in result.layers:
        gradient = layer.gradient or {}
        why = gradient.get("note")
        if gradient.get("zero") and why is not None and why == layer.cam_note:
            messages = [f"the gradient and the Grad-CAM map are all zero: {why}"]
        else:
            messages = []
            if gradient.get("zero"):
                messages.append("the gradient is all zero" + (f": {why}" if why else ""))
            if layer.cam_note:
                messages.append(f"the Grad-CAM map is all zero: {layer.cam_note}")
        for message in messages:
            found.setdefault(message, []).append(layer.key)
    return [f"{_names(keys)}: {message}" for message, keys in found.items()]


def _names(keys: list[str]) -> str:
    if len(keys) <= 3:
        return ", ".join(keys)
    return f"{keys[0]}, {keys[1]} and {len(keys) - 2} more layers"
