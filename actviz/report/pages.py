"""A static HTML report of a run: opens from disk, needs no network, links the grids in place.

:func:`build_report` turns the manifest, ``stats.json`` and a bounded :class:`ReportImages`
into files, made one at a time as the caller writes them, so that neither the inputs nor the
output grow with the number of images:

- ``index.html``: the run (model, weights with a red banner when they are random, device,
  selector, versions, date), its depth profile, per-layer summaries over the whole folder,
  its flags with the worst images of each kind, failed and skipped inputs (the first few and
  their count), and the first :data:`PAGE_ROWS` images of the image index. A run of one
  image shows that image's layers right there.
- ``report/index/NNN.html``: the rest of the image index, :data:`PAGE_ROWS` images a page,
  written as the rows stream by.
- ``report/images/<image>.html``: one page per *linked* image (the first
  :data:`LINKED_FIRST`, the worst of each flag kind, the first failures): its predictions,
  depth chart and one section per layer with the grid, statistics and anomaly badges. The
  index links every other image to its output folder, where its grids are.
- ``report/layers/<NN>_<layer>.html``: one layer: its summary over the whole folder and the
  grids of the linked images (folder runs).
- ``report/run_depth.svg``: the run's depth chart, pooled over all images.
- ``report/depth/<image>.svg``: a linked image's own depth chart, drawn for the linked images
  with an anomaly flag and for the first :data:`PER_IMAGE_CHARTS` of them; the page of any
  other shows the run's chart instead and says so.

So a folder of any size writes ``ceil(images / PAGE_ROWS)`` index pages (``index.html`` the
first), a page and at most a chart per linked image, a page per layer and the run's chart.

Every page is self-contained (inline CSS, one tiny inline script for the image filter) and
uses relative links only. Names come from the model and the file system, so every one is
HTML-escaped (the templates autoescape), and every URL is percent-encoded. Grids load lazily
and sections off screen skip layout (``content-visibility``).

This module decides which pages there are, in which order they are made, and how other
commands' reports are linked. What the pages share (their names and links) is in
:mod:`actviz.report.site`, the index in :mod:`actviz.report.index_pages`, the pages of the
linked images and of the layers in :mod:`actviz.report.linked_pages`, and the inputs of
earlier versions are read by :mod:`actviz.report.earlier`. The markup is in the Jinja2
templates of ``templates/``, rendered by :mod:`actviz.report.markup`; what the blocks show is
worked out by :mod:`actviz.report.blocks`, and the depth charts are drawn by
:mod:`actviz.report.charts`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from actviz.report.charts import depth_chart
from actviz.report.earlier import images_from_manifest, upgrade_stats
from actviz.report.index_pages import index_pages
from actviz.report.inputs import (
    LINKED_FIRST,
    LISTED,
    PAGE_ROWS,
    PER_IMAGE_CHARTS,
    RUN_CHART,
    WORST_LINKED,
    ReportImages,
    image_row,
)
from actviz.report.linked_pages import image_page, layer_page
from actviz.report.markup import render
from actviz.report.site import Site

__all__ = [
    "LINKED_FIRST",
    "LISTED",
    "PAGE_ROWS",
    "PER_IMAGE_CHARTS",
    "RELATED_REPORTS",
    "WORST_LINKED",
    "ReportImages",
    "ReportPages",
    "build_report",
    "image_row",
    "images_from_manifest",
    "rebuild_run_report",
    "related_reports",
]

# index.html's links to other commands' reports sit between these, so that a command writing
# beside a run can relink them without reading every image again.
_RELATED_START = b"<!-- related -->"
_RELATED_END = b"<!-- /related -->"


class ReportPages:
    """The report's files as ``(relative path, bytes)``, each made when iteration reaches it,
    so the caller writes them one at a time and nothing accumulates. Iterating again builds
    them again. ``items()`` is the same iteration, for callers written for a dict."""

    def __init__(self, make: Callable[[], Iterator[tuple[str, bytes]]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        return self._make()

    def items(self) -> Iterator[tuple[str, bytes]]:
        return self._make()


def build_report(
    manifest: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    images: ReportImages | None = None,
    *,
    out_dir_name: str = ".",
    related: Sequence[tuple[str, str]] = (),
) -> ReportPages:
    """Build the HTML report of a run.

    Args:
        manifest: What ``manifest.json`` holds (``actviz.run.manifest.manifest``). Its
            ``"images"`` is only read when ``images`` is None (see below).
        stats: What ``stats.json`` holds: format 2 (run-level summaries, flag counts and the
            worst images of each kind) or format 1 (per-image sections); None when
            statistics were not computed.
        images: The images to show. None reads them from a manifest of the earlier form
            whose ``"images"`` lists every image's record (:func:`images_from_manifest`).
        out_dir_name: The output folder's name, shown in the title.
        related: ``(page, text)`` of other commands' reports in the same folder
            (``top-images.html``, ``diff.html``), linked under the title.

    Returns:
        ``(path relative to the output folder, content)`` pairs, made one at a time as they
        are iterated. ``index.html`` belongs at the output folder's root, beside the image
        folders.
    """
    if images is None:
        images = images_from_manifest(manifest, stats)
    doc = upgrade_stats(stats, images.linked) if stats else None
    chosen = images

    def make() -> Iterator[tuple[str, bytes]]:
        return _pages(Site(manifest, doc, chosen, out_dir_name, list(related)))

    return ReportPages(make)


#: Other commands' reports a run report links to when they are in the same folder.
RELATED_REPORTS = (
    ("top-images.html", "top images of every channel"),
    ("diff.html", "layer-by-layer comparison"),
    ("ablate.html", "ablation: what each class loses"),
)


def related_reports(out: Path) -> list[tuple[str, str]]:
    """The :data:`RELATED_REPORTS` present in the output folder ``out``."""
    return [(page, text) for page, text in RELATED_REPORTS if (out / page).is_file()]


def rebuild_run_report(out: Path) -> dict[str, bytes]:
    """The run report of ``out`` made to link the reports written beside it since.

    Only ``index.html`` is rewritten, its links to other reports replaced: nothing of the
    images is read again, whatever their number. A report written before those links were
    marked is built again from a manifest that lists its images. Empty when ``out`` has no
    run report this version can update.
    """

    index = out / "index.html"
    try:
        page = index.read_bytes()
    except OSError:
        return {}
    start, end = page.find(_RELATED_START), page.find(_RELATED_END)
    if 0 <= start < end:
        block = _related_block(related_reports(out))
        return {"index.html": page[:start] + block + page[end + len(_RELATED_END) :]}
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        if not isinstance(manifest.get("images"), list):
            return {}
        stats_file = out / "stats.json"
        stats = json.loads(stats_file.read_text(encoding="utf-8")) if stats_file.exists() else None
    except (OSError, ValueError, AttributeError):
        return {}  # not a run's folder, or not one this version reads: leave it alone
    report = build_report(manifest, stats, out_dir_name=out.name, related=related_reports(out))
    return dict(report)


def _related_block(related: Sequence[tuple[str, str]]) -> bytes:
    return render("related.html", related=related).strip()


def _pages(site: Site) -> Iterator[tuple[str, bytes]]:
    """The report's files in the order they are made: the depth charts first, since the
    pages that show them need to know which were drawn, then the linked images' and the
    layers' pages, then the index."""
    for number, (image, view, slug) in enumerate(
        zip(site.images, site.views, site.slugs, strict=True)
    ):
        if view.layers and (number < PER_IMAGE_CHARTS or view.flags):
            chart = f"report/depth/{slug}.svg"
            site.charts.add(chart)
            yield chart, depth_chart(view.layers, view.flags, str(image.get("path", "")))
    run = site.stats.get("run")
    # A run of one image shows that image's own chart; pooled over one, it is the same.
    if site.folder and run and run.get("layers"):
        site.run_chart = True
        yield RUN_CHART, depth_chart(run["layers"], run.get("flags", []), "all images, pooled")
    if site.folder:
        for index in range(len(site.images)):
            yield f"report/images/{site.slugs[index]}.html", image_page(site, index)
        for index, (key, _) in enumerate(site.layers):
            page = f"report/layers/{site.layer_pages[index]}.html"
            yield page, layer_page(site, index, key)
    yield from index_pages(site)
