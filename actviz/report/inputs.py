"""What a run report is given: the images it shows, bounded whatever the size of the folder,
and the limits that bound them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LINKED_FIRST",
    "LISTED",
    "OK",
    "PAGE_ROWS",
    "PER_IMAGE_CHARTS",
    "RUN_CHART",
    "WORST_LINKED",
    "ReportImages",
    "image_row",
]

PER_IMAGE_CHARTS = 12
"""How many of the linked images get a depth chart of their own even without a flag.

Every linked image with at least one anomaly flag gets its chart too. The others share the
run's chart: a run of one image keeps its chart, a folder costs a dozen charts plus its
linked flagged images.
"""

LINKED_FIRST = 24
"""How many of a run's first images get a page of their own, flagged or not."""

WORST_LINKED = 20
"""How many of the worst images of each flag kind get a page: as many as ``stats.json`` lists
(``actviz.statistics.WORST``; the report reads statistics as data and imports nothing of them)."""

LISTED = 50
"""How many failed images and skipped inputs the index lists; it says how many there are."""

PAGE_ROWS = 500
"""Images a page of the image index lists."""

OK = ("ok", "reused")
"""The statuses of an image that was drawn (now or by an earlier run)."""

RUN_CHART = "report/run_depth.svg"
"""The run's depth chart, pooled over all images."""


@dataclass(frozen=True)
class ReportImages:
    """The images a report shows, bounded whatever the size of the folder.

    Attributes:
        total: Images of the run: drawn, reused and failed (not the skipped inputs).
        failed: How many of them failed.
        linked: Full image records (``actviz.run.manifest.image_record``), in image order,
            each with ``"flags"`` (``Flag.to_dict()`` of its layers) and ``"first_nonfinite"``
            when statistics were computed; a layer entry's ``"stats"`` is its
            ``LayerStats.to_dict()``. Bounded: the first :data:`LINKED_FIRST` images, the
            worst of each flag kind, the first failures. The drawn ones get a page each, the
            failed ones are listed on the index.
        rows: Makes, each time it is called, a stream of one slim row per image (every image,
            in image order): ``{"out_dir", "path", "status", "error", "prediction" (the top
            prediction or None), "flags" (its flag kinds), "thumbnail" (or None)}``, read from
            disk by the caller. See :func:`image_row`.
        folders: Whether a drawn image's output folder holds its pictures, so that the index
            can link an image without a page to it.
    """

    total: int
    failed: int
    linked: Sequence[Mapping[str, Any]]
    rows: Callable[[], Iterable[Mapping[str, Any]]]
    folders: bool = True


def image_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """The slim index row of a full image record (what :attr:`ReportImages.rows` yields)."""
    predictions = record.get("predictions") or []
    return {
        "out_dir": str(record.get("out_dir", "")),
        "path": str(record.get("path", "")),
        "status": record.get("status"),
        "error": record.get("error"),
        "prediction": predictions[0] if predictions else None,
        "flags": sorted({str(f.get("kind")) for f in record.get("flags") or []}),
        "thumbnail": record.get("thumbnail"),
    }
