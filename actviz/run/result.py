"""What a run produced, as data: its images (kept on disk in its ledger, read back when
asked: :class:`ImageRecords`), what it wrote, and the run itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from actviz.cards import run_card
from actviz.results import ImageResult
from actviz.run.families import IMAGE_KINDS
from actviz.statistics import FLAG_KINDS, find_flags, flag_counts

if TYPE_CHECKING:
    from actviz.models.registry import WeightsInfo

__all__ = ["ImageRecords", "RunCounts", "RunResult", "files_of", "having"]


class ImageRecords(Sequence[ImageResult]):
    """Every image of a run, in input order, each read back from the run's ledger only when
    asked for: iterating 100,000 images holds one at a time.

    Args:
        stubs: The images' stubs (path, folder, status, ``record`` offset).
        load: Reads the full result of a stub from the ledger.
    """

    def __init__(
        self,
        stubs: Sequence[ImageResult],
        load: Callable[[Iterable[ImageResult]], Iterator[ImageResult]] | None = None,
    ) -> None:
        self._stubs = stubs
        self._load = load

    def __len__(self) -> int:
        return len(self._stubs)

    @overload
    def __getitem__(self, index: int) -> ImageResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[ImageResult]: ...

    def __getitem__(self, index: int | slice) -> ImageResult | list[ImageResult]:
        if isinstance(index, slice):
            return list(self._loaded(self._stubs[index]))
        return next(self._loaded([self._stubs[index]]))

    def __iter__(self) -> Iterator[ImageResult]:
        return self._loaded(self._stubs)

    def where(self, status: str) -> list[ImageResult]:
        """The images with this status, read back."""
        return list(self.having(status))

    def having(self, status: str) -> Iterator[ImageResult]:
        """The images with this status, each read back only when reached."""
        return self._loaded(s for s in self._stubs if s.status == status)

    def count(self, status: object) -> int:
        """How many images have this status (``"ok"``, ``"failed"``, ``"reused"``)."""
        return sum(1 for s in self._stubs if s.status == status)

    def _loaded(self, stubs: Iterable[ImageResult]) -> Iterator[ImageResult]:
        if self._load is None:
            return iter(list(stubs))
        return self._load(stubs)


@dataclass
class RunCounts:
    """What a run wrote, counted as it went."""

    grids: int = 0
    """Activation grid PNGs (one per layer output drawn), for the images drawn by this run."""
    files: int = 0
    """Every per-layer picture, saved tensor, thumbnail and per-image chart of those images."""
    overlays: int = 0
    """Overlay PNGs of those images."""
    channels: dict[str, int] = field(default_factory=dict)
    """Each layer drawn for them, by key: its channel count."""


@dataclass
class RunResult:
    """Everything a run did, as written to ``manifest.json``."""

    model: str
    weights: WeightsInfo
    device: str
    selector: str
    layers: list[str]
    out: Path
    images: Sequence[ImageResult]
    """Every image, in input order; a run's are read back from its ledger when asked for."""
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
    counts: RunCounts = field(default_factory=RunCounts)
    notes: list[str] = field(default_factory=list)
    """What a person should know about the pictures (all-zero gradients and Grad-CAM maps,
    with the reason), each once, with the first image it was seen in."""
    undrawable: dict[str, str] = field(default_factory=dict)
    """Layer outputs that could not be drawn, with the reason (first image's words)."""

    def __repr__(self) -> str:

        return run_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return run_card(self).html()

    def flag_counts(self) -> dict[str, int]:
        """How many images raised each kind of anomaly flag."""
        if self.stats is None:
            return {}

        return flag_counts(self.stats)

    def flags(self, kinds: Iterable[str] | None = None) -> list[tuple[str, Any]]:
        """``(image folder, flag)`` of the most severe images of each of these kinds of anomaly
        flag (all by default; the first ``actviz.statistics.WORST`` of each: ``stats.parquet`` has
        every image's)."""
        if self.stats is None:
            return []

        return find_flags(self.stats, FLAG_KINDS if kinds is None else kinds)

    @property
    def failed(self) -> list[ImageResult]:
        """Images that could not be processed."""
        return _where(self.images, "failed")

    @property
    def reused(self) -> list[ImageResult]:
        """Images an earlier run had completed (``--resume``)."""
        return _where(self.images, "reused")

    def count(self, status: str) -> int:
        """How many images have this status (``"ok"``, ``"failed"``, ``"reused"``)."""
        if isinstance(self.images, ImageRecords):
            return self.images.count(status)
        return sum(1 for r in self.images if r.status == status)

    @property
    def grids_written(self) -> int:
        """Number of activation grid PNGs written (one per layer output drawn)."""
        return self.counts.grids

    @property
    def files_written(self) -> int:
        """Number of files written for the images this run drew: every per-layer picture
        (grids, overlays, gradient grids, Grad-CAMs, PCA views), saved tensors, input
        thumbnails, per-image gradient charts and the pictures of the whole input (a
        detector's boxes, heads and CAMs, a flow model's estimate); the run's own files, such
        as the manifest, are not counted."""
        return self.counts.files


def _where(images: Sequence[ImageResult], status: str) -> list[ImageResult]:
    return list(having(images, status))


def having(images: Sequence[ImageResult], status: str) -> Iterator[ImageResult]:
    """The images with this status; a run's read back from its ledger only when reached."""
    if isinstance(images, ImageRecords):
        return images.having(status)
    return (r for r in images if r.status == status)


def files_of(result: ImageResult) -> tuple[int, int]:
    """``(grids, files)`` an image drawn by a run wrote (see :class:`RunCounts`)."""
    if result.status != "ok":
        return 0, 0
    grids = sum(1 for layer in result.layers if layer.file)
    # The pictures of the whole input its record names (what the model saw, a flow model's
    # estimate, a detector's boxes, heads, CAMs), and a kind's tensor beside its picture when
    # the layers' tensors were saved (--save-tensors: optical_flow.npy).
    saved = any(layer.tensor_file is not None for layer in result.layers)
    kept = [kind for kind in IMAGE_KINDS if kind.kept(result)]
    files = (result.gradient_flow is not None) + len(kept)
    files += sum(1 for kind in kept if kind.tensor is not None and saved)
    files += sum(len(layer.pictures) + (layer.tensor_file is not None) for layer in result.layers)
    return grids, files
