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

This module decides which pages there are, what each shows and how they link to each other.
The markup is in the Jinja2 templates of ``templates/``, rendered by
:mod:`actviz.report.markup`; what the blocks show is worked out by :mod:`actviz.report.blocks`,
and the depth charts are drawn by :mod:`actviz.report.charts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.errors import UsageError
from actviz.output import safe_name
from actviz.report.blocks import by_name, run_meta, run_warnings, weights_banner
from actviz.report.charts import depth_chart
from actviz.report.markup import render

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
(``actviz.stats.WORST``; the report reads statistics as data and imports nothing of them)."""

LISTED = 50
"""How many failed images and skipped inputs the index lists; it says how many there are."""

PAGE_ROWS = 500
"""Images a page of the image index lists."""

_OK = ("ok", "reused")
_RUN_CHART = "report/run_depth.svg"
# index.html's links to other commands' reports sit between these, so that a command writing
# beside a run can relink them without reading every image again.
_RELATED_START = b"<!-- related -->"
_RELATED_END = b"<!-- /related -->"


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
    doc = _upgrade(stats, images.linked) if stats else None
    chosen = images

    def make() -> Iterator[tuple[str, bytes]]:
        return _Report(manifest, doc, chosen, out_dir_name, list(related)).build()

    return ReportPages(make)


#: Other commands' reports a run report links to when they are in the same folder.
RELATED_REPORTS = (
    ("top-images.html", "top images of every channel"),
    ("diff.html", "layer-by-layer comparison"),
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
    import json

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


# ---------------------------------------------------------------------- earlier inputs


def images_from_manifest(
    manifest: Mapping[str, Any], stats: Mapping[str, Any] | None
) -> ReportImages:
    """The :class:`ReportImages` of a manifest whose ``"images"`` lists every image's record
    (as ``manifest.json`` did before it pointed at the run's ledger), with the flags of a
    ``stats.json`` of format 1 (a manifest that points at its ledger instead raises
    :class:`~actviz.errors.UsageError`). It picks the linked images as a run does: the first
    :data:`LINKED_FIRST`, the first :data:`WORST_LINKED` of each flag kind, the first
    :data:`LISTED` failures."""
    records = manifest.get("images")
    if isinstance(records, Mapping):
        raise UsageError(
            "this manifest.json points at its run's ledger rather than listing its images: "
            "pass the report its images (ReportImages, with rows read from the ledger)"
        )
    records = records if isinstance(records, list) else []
    sections = _sections(stats)
    full: list[dict[str, Any]] = [
        _with_stats(r, sections.get(str(r.get("out_dir")))) for r in records
    ]
    linked: list[dict[str, Any]] = []
    drawn = failed = 0
    per_kind: dict[str, int] = {}
    for record in full:
        if record.get("status") == "failed":
            failed += 1
            if failed <= LISTED:
                linked.append(record)
            continue
        if record.get("status") not in _OK:
            continue
        drawn += 1
        kinds = {str(f.get("kind")) for f in record.get("flags") or []}
        worst = False
        for kind in kinds:
            per_kind[kind] = per_kind.get(kind, 0) + 1
            worst = worst or per_kind[kind] <= WORST_LINKED
        if drawn <= LINKED_FIRST or worst:
            linked.append(record)
    rows = [image_row(r) for r in full]
    return ReportImages(
        total=len(full), failed=failed, linked=linked, rows=lambda: iter(rows), folders=True
    )


def _sections(stats: Mapping[str, Any] | None) -> Mapping[str, Mapping[str, Any]]:
    """A format-1 ``stats.json``'s per-image sections by image key; empty for format 2."""
    if not stats or stats.get("format", 1) >= 2:
        return {}
    images = stats.get("images") or {}
    return images if isinstance(images, Mapping) else {}


def _with_stats(record: Mapping[str, Any], section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record with its flags, first non-finite layer and each layer's statistics from its
    format-1 ``stats.json`` section."""
    out = dict(record)
    if section is None:
        return out
    out.setdefault("flags", list(section.get("flags") or []))
    out.setdefault("first_nonfinite", section.get("first_nonfinite"))
    rows = by_name(section.get("layers") or [])
    layers = []
    for entry in record.get("layers") or []:
        row = rows.get(str(entry.get("name", "")))
        if entry.get("stats") is None and row is not None:
            entry = {**entry, "stats": {k: v for k, v in row.items() if k != "name"}}
        layers.append(entry)
    out["layers"] = layers
    return out


def _upgrade(stats: Mapping[str, Any], linked: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``stats.json`` as format 2 shows it: a format-1 document's run-level parts are worked
    out from its per-image sections (the earlier form held them all)."""
    if stats.get("format", 1) >= 2:
        return dict(stats)
    sections = _sections(stats)
    kinds = list(stats.get("flag_kinds") or [])
    run = stats.get("run")
    if run is None and len(sections) == 1:
        run = next(iter(sections.values()))  # pooled over one image is that image
    counts: dict[str, int] = dict.fromkeys(kinds, 0)
    per_layer: dict[str, dict[str, int]] = {}
    firsts: dict[tuple[str, str], list[Any]] = {}
    nonfinite: dict[str, list[Any]] = {}
    worst: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, dict[str, list[float]]] = {}
    flagged = 0
    for key, section in sections.items():
        flags = section.get("flags") or []
        flagged += bool(flags)
        seen: set[str] = set()
        for flag in flags:
            kind, layer = str(flag.get("kind")), str(flag.get("layer"))
            per_layer.setdefault(layer, {}).setdefault(kind, 0)
            if (layer, kind) not in firsts:
                firsts[(layer, kind)] = [0, key]
            if kind in seen:
                continue
            seen.add(kind)
            counts[kind] = counts.get(kind, 0) + 1
            if len(worst.setdefault(kind, [])) < WORST_LINKED:
                entry = {"image": key, "layer": layer, "message": flag.get("message")}
                worst[kind].append({**entry, "severity": None})
        for layer, kind in {(str(f.get("layer")), str(f.get("kind"))) for f in flags}:
            per_layer[layer][kind] += 1
            firsts[(layer, kind)][0] += 1
        first = section.get("first_nonfinite")
        if first:
            nonfinite.setdefault(str(first), [0, key])[0] += 1
        for row in section.get("layers") or []:
            found = values.setdefault(str(row.get("name")), {})
            for name, value in _row_values(row).items():
                found.setdefault(name, []).append(value)
    layers = []
    for row in (run or {}).get("layers") or []:
        name = str(row.get("name"))
        found = values.get(name, {})
        layers.append(
            {
                **row,
                "images": len(found.get("max", [])),
                "across_images": {k: _quantiles(v) for k, v in found.items()},
                "flagged": per_layer.get(name, {}),
            }
        )
    return {
        **stats,
        "run": {**run, "layers": layers} if run else None,
        "flags": {
            "images": counts,
            "layers": [
                {"layer": layer, "kind": kind, "images": n, "first": first}
                for (layer, kind), (n, first) in firsts.items()
            ],
            "worst": worst,
            "first_nonfinite": [
                {"layer": layer, "images": n, "first": first}
                for layer, (n, first) in nonfinite.items()
            ],
        },
        "images": {"count": len(sections), "flagged": flagged},
    }


def _row_values(row: Mapping[str, Any]) -> dict[str, float]:
    """What the summary compares across images: mean, RMS, max, dead fraction (finite)."""
    out: dict[str, float] = {}
    mean, std = row.get("mean"), row.get("std")
    for name in ("mean", "max", "dead_frac"):
        value = row.get(name)
        if isinstance(value, int | float) and math.isfinite(value):
            out[name] = float(value)
    if isinstance(mean, int | float) and isinstance(std, int | float):
        out["rms"] = math.sqrt(mean * mean + std * std)
    return out


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, math.ceil(q * n) - 1))]

    return {"p01": rank(0.01), "p50": rank(0.5), "p99": rank(0.99)}


# ---------------------------------------------------------------------- the pages


class _Report:
    """The pages of one run; one instance per iteration of :func:`build_report`'s pages."""

    def __init__(
        self,
        manifest: Mapping[str, Any],
        stats: Mapping[str, Any] | None,
        images: ReportImages,
        name: str,
        related: list[tuple[str, str]],
    ) -> None:
        self.m = manifest
        self.stats: Mapping[str, Any] = stats or {}
        self.input = images
        self.name = name
        self.related = related
        linked = images.linked
        self.images = [im for im in linked if im.get("status") in _OK]
        self.failed = [im for im in linked if im.get("status") == "failed"][:LISTED]
        self.drawn = images.total - images.failed
        self.folder = self.drawn > 1
        self.slugs = _unique_slugs(str(im.get("out_dir", "")) for im in self.images)
        self.pages = {
            str(im.get("out_dir", "")): f"report/images/{slug}.html"
            for im, slug in zip(self.images, self.slugs, strict=True)
        }
        run = self.stats.get("run") or {}
        self.run_rows = by_name(run.get("layers") or [])
        self.layers = _layer_order(self.images, self.run_rows)
        width = max(2, len(str(len(self.layers) - 1)))
        self.layer_pages = _unique_slugs(
            f"{i:0{width}d}_{key}" for i, (key, _) in enumerate(self.layers)
        )
        self.layer_index = {key: i for i, (key, _) in enumerate(self.layers)}
        self.views = [_ImageView(image) for image in self.images]
        self.charts: set[str] = set()
        self.run_chart = False

    def build(self) -> Iterator[tuple[str, bytes]]:
        for number, (image, view, slug) in enumerate(
            zip(self.images, self.views, self.slugs, strict=True)
        ):
            if view.layers and (number < PER_IMAGE_CHARTS or view.flags):
                chart = f"report/depth/{slug}.svg"
                self.charts.add(chart)
                yield chart, depth_chart(view.layers, view.flags, str(image.get("path", "")))
        run = self.stats.get("run")
        # A run of one image shows that image's own chart; pooled over one, it is the same.
        if self.folder and run and run.get("layers"):
            self.run_chart = True
            yield _RUN_CHART, depth_chart(run["layers"], run.get("flags", []), "all images, pooled")
        if self.folder:
            for index in range(len(self.images)):
                yield f"report/images/{self.slugs[index]}.html", self._image_page(index)
            for index, (key, _) in enumerate(self.layers):
                page = f"report/layers/{self.layer_pages[index]}.html"
                yield page, self._layer_page(index, key)
        yield from self._index_pages()

    # ------------------------------------------------------------------ the index

    def _index_pages(self) -> Iterator[tuple[str, bytes]]:
        """``index.html`` with the first page of the image index, then the further pages of
        it, each made from :data:`PAGE_ROWS` rows as the stream goes by."""
        rows = iter(self.input.rows()) if self.folder else iter(())
        pages = max(1, math.ceil(self.input.total / PAGE_ROWS))
        pending = next(rows, None)
        number = 1
        while True:
            chunk: list[Mapping[str, Any]] = []
            while pending is not None and len(chunk) < PAGE_ROWS:
                chunk.append(pending)
                pending = next(rows, None)
            more = pending is not None
            pages = max(pages, number + more)
            start = (number - 1) * PAGE_ROWS
            if number == 1:
                yield "index.html", self._index(chunk, more, pages)
            else:
                yield _index_page(number), self._index_page(number, chunk, start, more, pages)
            if not more:
                return
            number += 1

    def _pager(self, number: int, more: bool, pages: int, base: str) -> _Pager:
        def page(n: int) -> str:
            if n == 1:
                return f"{base}index.html"
            # From a further page, the others are beside it.
            return f"{n:03d}.html" if base else _index_page(n)

        return _Pager(
            number=number,
            pages=pages,
            previous=page(number - 1) if number > 1 else None,
            next=page(number + 1) if more else None,
        )

    def _index(self, chunk: list[Mapping[str, Any]], more: bool, pages: int) -> bytes:
        run = self.stats.get("run")
        single = self._image_body(0, "") if self.images and not self.folder else None
        skipped = list(self.m.get("skipped") or [])
        tables = self.stats.get("images") if self.stats.get("format", 1) >= 2 else None
        tables = tables if isinstance(tables, Mapping) else {}
        return render(
            "index.html",
            manifest=self.m,
            name=self.name,
            banner=weights_banner(self.m),
            warnings=run_warnings(self.m),
            meta=run_meta(
                self.m, layers=len(self.layers), drawn=self.drawn, failed=self.input.failed
            ),
            run_chart=_RUN_CHART if self.run_chart else None,
            flag_summary=self._flag_summary(run.get("flags", []) if run else []),
            worst=self._worst() if self.folder else [],
            nonfinite=self._nonfinite() if self.folder else [],
            folder=self.folder,
            total=self.input.total,
            linked=len(self.images),
            drawn=self.drawn,
            folders=self.input.folders,
            table=tables.get("table"),
            csv=tables.get("csv") if tables.get("table") else None,
            summaries=bool(self.run_rows),
            images=self._image_rows(chunk, 0, ""),
            paging=self._pager(1, more, pages, ""),
            layers=self._layer_rows() if self.folder else [],
            single=single,
            failed=self.failed,
            failed_total=self.input.failed,
            skipped=skipped[:LISTED],
            skipped_total=len(skipped),
            related=self.related,
        )

    def _index_page(
        self, number: int, chunk: list[Mapping[str, Any]], start: int, more: bool, pages: int
    ) -> bytes:
        return render(
            "index_page.html",
            manifest=self.m,
            name=self.name,
            banner=weights_banner(self.m),
            total=self.input.total,
            first=start + 1,
            last=start + len(chunk),
            images=self._image_rows(chunk, start, "../../"),
            paging=self._pager(number, more, pages, "../../"),
        )

    def _image_rows(
        self, chunk: Sequence[Mapping[str, Any]], start: int, base: str
    ) -> list[_ImageRow]:
        rows = []
        for offset, row in enumerate(chunk):
            key = str(row.get("out_dir", ""))
            status = row.get("status")
            page = self.pages.get(key)
            if page is not None:
                target: str | None = base + page
            elif status in _OK and self.input.folders and key:
                target = f"{base}{key}/"  # no page of its own: its folder holds its grids
            else:
                target = None
            thumbnail = row.get("thumbnail")
            rows.append(
                _ImageRow(
                    number=start + offset + 1,
                    path=row.get("path", ""),
                    page=target,
                    own_page=page is not None,
                    thumbnail=base + str(thumbnail) if thumbnail and status in _OK else None,
                    top=row.get("prediction"),
                    kinds=_kinds(row.get("flags")),
                    failed=status == "failed",
                    error=row.get("error"),
                )
            )
        return rows

    def _layer_rows(self) -> list[_LayerRow]:
        rows = []
        for index, (key, layer) in enumerate(self.layers):
            summary = self.run_rows.get(key)
            flagged = dict((summary or {}).get("flagged") or {})
            rows.append(
                _LayerRow(
                    key=key,
                    layer=layer,
                    page=f"report/layers/{self.layer_pages[index]}.html",
                    flagged=sorted((k, n) for k, n in flagged.items() if n),
                    summary=summary,
                    across=(summary or {}).get("across_images") or {},
                )
            )
        return rows

    def _image_link(self, key: str, base: str = "") -> str | None:
        page = self.pages.get(key)
        if page is not None:
            return base + page
        return f"{base}{key}/" if self.input.folders and key else None

    def _worst(self) -> list[_Worst]:
        """Each flag kind raised in some image: how many images, and the worst of them."""
        flags = self.stats.get("flags") or {}
        counts = flags.get("images") or {}
        worst = flags.get("worst") or {}
        kinds = list(self.stats.get("flag_kinds") or []) or list(counts)
        kinds += [k for k in list(counts) + list(worst) if k not in kinds]
        out = []
        for kind in kinds:
            entries = worst.get(kind) or []
            if not counts.get(kind) and not entries:
                continue
            out.append(
                _Worst(
                    kind=kind,
                    images=int(counts.get(kind) or len(entries)),
                    entries=[
                        _WorstEntry(
                            image=str(e.get("image", "")),
                            page=self._image_link(str(e.get("image", ""))),
                            layer=str(e.get("layer", "")),
                            layer_page=self._layer_page_of(str(e.get("layer", ""))),
                            message=e.get("message"),
                        )
                        for e in entries
                    ],
                )
            )
        return out

    def _nonfinite(self) -> list[tuple[str, str | None, int, str, str | None]]:
        """Where non-finite values first appear: layer, its page, images, first image, page."""
        entries = (self.stats.get("flags") or {}).get("first_nonfinite") or []
        return [
            (
                str(e.get("layer", "")),
                self._layer_page_of(str(e.get("layer", ""))),
                int(e.get("images") or 0),
                str(e.get("first", "")),
                self._image_link(str(e.get("first", ""))),
            )
            for e in entries
        ]

    def _layer_page_of(self, key: str, base: str = "") -> str | None:
        index = self.layer_index.get(key)
        if not self.folder or index is None:
            return None
        return f"{base}report/layers/{self.layer_pages[index]}.html"

    # ------------------------------------------------------------------ linked pages

    def _image_page(self, index: int) -> bytes:
        return render(
            "image.html",
            manifest=self.m,
            banner=weights_banner(self.m),
            previous=f"{self.slugs[index - 1]}.html" if index > 0 else None,
            next=f"{self.slugs[index + 1]}.html" if index + 1 < len(self.slugs) else None,
            body=self._image_body(index, "../../"),
        )

    def _layer_page(self, index: int, key: str) -> bytes:
        pages = self.layer_pages
        run = self.stats.get("run")
        summary = self.run_rows.get(key)
        cards = []
        for image, view, slug in zip(self.images, self.views, self.slugs, strict=True):
            found = view.positions.get(key)
            if found is not None:
                position, entry = found
                kinds = view.kinds.get(key, [])
                page = f"../images/{slug}.html"
                cards.append(_Card(image, page, position, entry, kinds, view.rows.get(key)))
        flags = (self.stats.get("flags") or {}).get("layers") or []
        return render(
            "layer.html",
            manifest=self.m,
            banner=weights_banner(self.m),
            previous=f"{pages[index - 1]}.html" if index > 0 else None,
            next=f"{pages[index + 1]}.html" if index + 1 < len(pages) else None,
            key=key,
            layer=self.layers[index][1],
            number=index + 1,
            count=len(self.layers),
            run_row=summary,
            across=(summary or {}).get("across_images") or {},
            images=(summary or {}).get("images"),
            flagged=[
                (
                    str(f.get("kind", "")),
                    int(f.get("images") or 0),
                    str(f.get("first", "")),
                    self._image_link(str(f.get("first", "")), "../../"),
                )
                for f in flags
                if str(f.get("layer")) == key
            ],
            run_flags=[f for f in run.get("flags", []) if f.get("layer") == key] if run else [],
            cards=cards,
            total=self.drawn,
        )

    def _image_body(self, index: int, base: str) -> _ImageBody:
        image, view, slug = self.images[index], self.views[index], self.slugs[index]
        chart = f"report/depth/{slug}.svg"
        first = view.first_nonfinite
        found = view.positions.get(str(first)) if first else None
        layers = list(image.get("layers") or [])
        sections = []
        for position, entry in enumerate(layers):
            key = str(entry.get("name", ""))
            sections.append(
                _Section(
                    position=position,
                    total=len(layers),
                    # Where the layer sits in the network, as a marker on a bar of its depth.
                    marker=100 * position / max(len(layers) - 1, 1),
                    key=key,
                    entry=entry,
                    kinds=view.kinds.get(key, []),
                    messages=view.messages.get(key, []),
                    row=view.rows.get(key),
                    across=self._layer_page_of(key),
                )
            )
        return _ImageBody(
            image=image,
            base=base,
            chart=chart if chart in self.charts else None,
            # An image without a chart of its own shows the run's and says why.
            shared_chart=bool(view.layers),
            run_chart=_RUN_CHART if self.run_chart else None,
            per_image_charts=PER_IMAGE_CHARTS,
            first_nonfinite=str(first) if first else None,
            first_anchor=f"L{found[0]}" if found else "",
            layers=layers,
            rows=view.rows,
            kinds=view.kinds,
            sections=sections,
        )

    def _flag_summary(self, flags: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[_Link]]]:
        """The run's flags by kind: each flagged layer with its page, if any."""
        by_kind: dict[str, list[str]] = {}
        for flag in flags:
            by_kind.setdefault(str(flag.get("kind")), []).append(str(flag.get("layer")))
        return [
            (kind, [(key, self._layer_page_of(key)) for key in dict.fromkeys(names)])
            for kind, names in by_kind.items()
        ]


def _index_page(number: int) -> str:
    return f"report/index/{number:03d}.html"


def _kinds(flags: object) -> list[str]:
    """Flag kinds from a row's ``"flags"``: kind names, or flag records."""
    if not isinstance(flags, list | tuple):
        return []
    return sorted({str(f.get("kind")) if isinstance(f, Mapping) else str(f) for f in flags})


_Link = tuple[str, "str | None"]  # a layer's name and its page across images, if it has one


@dataclass(frozen=True)
class _Section:
    """One layer's section on an image's page."""

    position: int
    total: int
    marker: float
    key: str
    entry: Mapping[str, Any]
    kinds: list[str]
    messages: list[Any]
    row: Mapping[str, Any] | None
    across: str | None


@dataclass(frozen=True)
class _ImageBody:
    """What an image's page shows below its title; a run of one image shows it on the index."""

    image: Mapping[str, Any]
    base: str
    chart: str | None
    shared_chart: bool
    run_chart: str | None
    per_image_charts: int
    first_nonfinite: str | None
    first_anchor: str
    layers: list[Mapping[str, Any]]
    rows: Mapping[str, Mapping[str, Any]]
    kinds: Mapping[str, list[str]]
    sections: list[_Section]


@dataclass(frozen=True)
class _ImageRow:
    """One image in the index of a folder run."""

    number: int
    path: object
    page: str | None
    own_page: bool
    thumbnail: str | None
    top: Mapping[str, Any] | None
    kinds: list[str]
    failed: bool
    error: object


@dataclass(frozen=True)
class _Pager:
    """Where a page of the image index sits among the others."""

    number: int
    pages: int
    previous: str | None
    next: str | None


@dataclass(frozen=True)
class _LayerRow:
    """One layer in the index of a folder run, with its summary over the whole folder."""

    key: str
    layer: Mapping[str, Any]
    page: str
    flagged: list[tuple[str, int]]
    summary: Mapping[str, Any] | None
    across: Mapping[str, Any]


@dataclass(frozen=True)
class _WorstEntry:
    image: str
    page: str | None
    layer: str
    layer_page: str | None
    message: object


@dataclass(frozen=True)
class _Worst:
    """One flag kind: how many images raise it, and the worst of them."""

    kind: str
    images: int
    entries: list[_WorstEntry] = field(default_factory=list)


@dataclass(frozen=True)
class _Card:
    """One image's card on a layer's page."""

    image: Mapping[str, Any]
    page: str
    position: int
    entry: Mapping[str, Any]
    kinds: list[str]
    row: Mapping[str, Any] | None


class _ImageView:
    """One linked image's lookups, made once per report rather than once per layer and page:
    its layers' statistics rows by name, its flags' kinds and messages by layer, and where
    each layer sits in its record."""

    def __init__(self, image: Mapping[str, Any]) -> None:
        entries = list(image.get("layers") or [])
        self.layers: list[Mapping[str, Any]] = [
            {"name": str(e.get("name", "")), **e["stats"]} for e in entries if e.get("stats")
        ]
        self.flags: list[Mapping[str, Any]] = list(image.get("flags") or [])
        self.first_nonfinite = image.get("first_nonfinite")
        self.rows = by_name(self.layers)
        self.kinds: dict[str, list[str]] = {}
        self.messages: dict[str, list[Any]] = {}
        for flag in self.flags:
            layer = str(flag.get("layer"))
            self.kinds.setdefault(layer, []).append(str(flag.get("kind")))
            self.messages.setdefault(layer, []).append(flag.get("message", ""))
        self.positions: dict[str, tuple[int, Mapping[str, Any]]] = {}
        for position, entry in enumerate(entries):
            self.positions.setdefault(str(entry.get("name", "")), (position, entry))


def _layer_order(
    images: Sequence[Mapping[str, Any]], run_rows: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, Mapping[str, Any]]]:
    """Every layer key in capture order, first seen first, with its first entry; then the
    layers only the folder's summary knows (no linked image has them)."""
    seen: dict[str, Mapping[str, Any]] = {}
    for image in images:
        for entry in image.get("layers") or []:
            seen.setdefault(str(entry.get("name", "")), entry)
    for key in run_rows:
        seen.setdefault(key, {"name": key})
    return list(seen.items())


def _unique_slugs(names: Iterable[str]) -> list[str]:
    """File-name-safe, distinct (ignoring case) names: '/' in a nested folder becomes '__'."""
    taken: set[str] = set()
    slugs = []
    for name in names:
        base = safe_name(name.replace("/", "__"), max_len=100)
        slug, counter = base, 2
        while slug.casefold() in taken:
            slug = f"{base}-{counter}"
            counter += 1
        taken.add(slug.casefold())
        slugs.append(slug)
    return slugs
