"""A static HTML report of a run: opens from disk, needs no network, links the grids in place.

:func:`build_report` turns the manifest (and ``stats.json``, when statistics were computed)
into files, returned as ``relative path -> bytes`` for ``actviz.output`` to write:

- ``index.html``: the run (model, weights with a red banner when they are random, device,
  selector, versions, date), its depth profile and flags, failed and skipped inputs. A run
  of one image shows that image's layers right there; a folder run lists its images and
  layers instead, each linking to a page of its own.
- ``report/images/<image>.html``: one image, its predictions, its depth chart and one
  section per layer with the grid, statistics and anomaly badges.
- ``report/layers/<NN>_<layer>.html``: one layer across every image (folder runs).
- ``report/run_depth.svg``: the run's depth chart, pooled over all images.
- ``report/depth/<image>.svg``: an image's own depth chart, drawn for every image with an
  anomaly flag and for the first :data:`PER_IMAGE_CHARTS` images of the run, so a folder of
  thousands does not write thousands of charts; the page of any other image shows the run's
  chart instead and says so, and that image's numbers stay in its layer table and in
  ``stats.json``.

Every page is self-contained (inline CSS, one tiny inline script for the image filter) and
uses relative links only. Names come from the model and the file system, so every one is
HTML-escaped (the templates autoescape), and every URL is percent-encoded. Grids load lazily
and sections off screen skip layout (``content-visibility``), so a run of hundreds of images
stays responsive.

This module decides which pages there are, what each shows and how they link to each other.
The markup is in the Jinja2 templates of ``templates/`` (the page shell and stylesheet, the
blocks as macros, one template per kind of page), rendered by :mod:`actviz.report.markup`;
what the blocks show is worked out by :mod:`actviz.report.blocks`, and the depth charts are
drawn by :mod:`actviz.report.charts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actviz.output import safe_name
from actviz.report.blocks import by_name, run_meta, run_warnings, weights_banner
from actviz.report.charts import depth_chart
from actviz.report.markup import render

__all__ = [
    "PER_IMAGE_CHARTS",
    "RELATED_REPORTS",
    "build_report",
    "rebuild_run_report",
    "related_reports",
]

PER_IMAGE_CHARTS = 12
"""How many of a run's first images get a depth chart of their own even without a flag.

Every image with at least one anomaly flag gets its chart too, wherever it comes in the run.
The others share the run's chart: a run of one image keeps its chart, a folder of hundreds
costs a dozen charts plus its flagged images rather than one chart per image.
"""

_OK = ("ok", "reused")
_RUN_CHART = "report/run_depth.svg"


def build_report(
    manifest: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    *,
    out_dir_name: str = ".",
    related: Sequence[tuple[str, str]] = (),
) -> dict[str, bytes]:
    """Build the HTML report of a run.

    Args:
        manifest: What ``manifest.json`` holds (``actviz.api.manifest``). An image entry may
            carry ``"thumbnail"``: the path, relative to the output folder, of a small copy
            of the input picture; it is shown only when present. A layer entry may carry
            ``"width"`` and ``"height"`` of its grid PNG, which let the browser reserve space.
        stats: What ``stats.json`` holds (``actviz.stats.compute.to_json``), keyed by the images'
            ``out_dir``; None when statistics were not computed.
        out_dir_name: The output folder's name, shown in the title.
        related: ``(page, text)`` of other commands' reports in the same folder
            (``top-images.html``, ``diff.html``), linked under the title.

    Returns:
        Paths relative to the output folder (``index.html``, ``report/...``) -> file content.
        ``index.html`` belongs at the output folder's root, beside the image folders.
    """
    report = _Report(manifest, stats, out_dir_name)
    report.related = list(related)
    return report.build()


#: Other commands' reports a run report links to when they are in the same folder.
RELATED_REPORTS = (
    ("top-images.html", "top images of every channel"),
    ("diff.html", "layer-by-layer comparison"),
)


def related_reports(out: Path) -> list[tuple[str, str]]:
    """The :data:`RELATED_REPORTS` present in the output folder ``out``."""
    return [(page, text) for page, text in RELATED_REPORTS if (out / page).is_file()]


def rebuild_run_report(out: Path) -> dict[str, bytes]:
    """The run report of ``out`` built again from its ``manifest.json`` and ``stats.json``,
    so that it links the reports written beside it since; empty when ``out`` has no run."""
    import json

    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        if not (out / "index.html").is_file() or "images" not in manifest:
            return {}
        stats_file = out / "stats.json"
        stats = json.loads(stats_file.read_text(encoding="utf-8")) if stats_file.exists() else None
    except (OSError, ValueError):
        return {}  # not a run's folder, or not one this version reads: leave it alone
    return build_report(manifest, stats, out_dir_name=out.name, related=related_reports(out))


class _Report:
    """The pages of one run; one instance per :func:`build_report` call."""

    def __init__(
        self, manifest: Mapping[str, Any], stats: Mapping[str, Any] | None, name: str
    ) -> None:
        self.m = manifest
        self.stats = stats or {}
        self.name = name
        self.images = [im for im in manifest.get("images", []) if im.get("status") in _OK]
        self.failed = [im for im in manifest.get("images", []) if im.get("status") == "failed"]
        self.folder = len(self.images) > 1
        self.slugs = _unique_slugs(str(im.get("out_dir", "")) for im in self.images)
        self.layers = _layer_order(self.images)
        width = max(2, len(str(len(self.layers) - 1)))
        self.layer_pages = _unique_slugs(
            f"{i:0{width}d}_{key}" for i, (key, _) in enumerate(self.layers)
        )
        self.layer_index = {key: i for i, (key, _) in enumerate(self.layers)}
        self.views = [_ImageView(image, self._image_stats(image)) for image in self.images]
        self.files: dict[str, bytes] = {}
        self.related: list[tuple[str, str]] = []

    # ------------------------------------------------------------------ pages

    def build(self) -> dict[str, bytes]:
        for number, (image, view, slug) in enumerate(
            zip(self.images, self.views, self.slugs, strict=True)
        ):
            if view.layers and (number < PER_IMAGE_CHARTS or view.flags):
                self.files[f"report/depth/{slug}.svg"] = depth_chart(
                    view.layers, view.flags, str(image.get("path", ""))
                )
        run = self.stats.get("run")
        if run and run.get("layers"):
            self.files[_RUN_CHART] = depth_chart(
                run["layers"], run.get("flags", []), "all images, pooled"
            )
        if self.folder:
            for index, slug in enumerate(self.slugs):
                self.files[f"report/images/{slug}.html"] = self._image_page(index)
            for index, (key, _) in enumerate(self.layers):
                page = f"report/layers/{self.layer_pages[index]}.html"
                self.files[page] = self._layer_page(index, key)
        self.files["index.html"] = self._index()
        return self.files

    def _index(self) -> bytes:
        run = self.stats.get("run")
        single = self._image_body(0, "") if self.images and not self.folder else None
        return render(
            "index.html",
            manifest=self.m,
            name=self.name,
            banner=weights_banner(self.m),
            warnings=run_warnings(self.m),
            meta=run_meta(
                self.m, layers=len(self.layers), drawn=len(self.images), failed=len(self.failed)
            ),
            run_chart=_RUN_CHART if _RUN_CHART in self.files else None,
            flag_summary=self._flag_summary(run.get("flags", []) if run else []),
            folder=self.folder,
            images=self._image_rows() if self.folder else [],
            layers=self._layer_rows() if self.folder else [],
            single=single,
            failed=self.failed,
            skipped=self.m.get("skipped") or [],
            related=self.related,
        )

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
        cards = []
        for image, view, slug in zip(self.images, self.views, self.slugs, strict=True):
            found = view.positions.get(key)
            if found is not None:
                position, entry = found
                kinds = view.kinds.get(key, [])
                page = f"../images/{slug}.html"
                cards.append(_Card(image, page, position, entry, kinds, view.rows.get(key)))
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
            run_row=by_name(run.get("layers", [])).get(key) if run else None,
            run_flags=[f for f in run.get("flags", []) if f.get("layer") == key] if run else [],
            cards=cards,
        )

    # ------------------------------------------------------------------ linked blocks

    def _image_body(self, index: int, base: str) -> _ImageBody:
        image, view, slug = self.images[index], self.views[index], self.slugs[index]
        chart = f"report/depth/{slug}.svg"
        first = view.stats.get("first_nonfinite") if view.stats else None
        found = view.positions.get(str(first)) if first else None
        layers = list(image.get("layers") or [])
        sections = []
        for position, entry in enumerate(layers):
            key = entry.get("name", "")
            across = None
            if self.folder and key in self.layer_index:
                across = f"report/layers/{self.layer_pages[self.layer_index[key]]}.html"
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
                    across=across,
                )
            )
        return _ImageBody(
            image=image,
            base=base,
            chart=chart if chart in self.files else None,
            # An image without a chart of its own shows the run's and says why.
            shared_chart=bool(view.layers),
            run_chart=_RUN_CHART if _RUN_CHART in self.files else None,
            per_image_charts=PER_IMAGE_CHARTS,
            first_nonfinite=str(first) if first else None,
            first_anchor=f"L{found[0]}" if found else "",
            layers=layers,
            rows=view.rows,
            kinds=view.kinds,
            sections=sections,
        )

    def _image_rows(self) -> list[_ImageRow]:
        rows = []
        for image, view, slug in zip(self.images, self.views, self.slugs, strict=True):
            first = view.stats.get("first_nonfinite") if view.stats else None
            rows.append(
                _ImageRow(
                    path=image.get("path", ""),
                    page=f"report/images/{slug}.html",
                    thumbnail=image.get("thumbnail"),
                    top=(image.get("predictions") or [None])[0],
                    kinds=sorted({str(f.get("kind", "")) for f in view.flags}),
                    first_nonfinite=first,
                )
            )
        return rows

    def _layer_rows(self) -> list[_LayerRow]:
        counts: dict[str, int] = {}
        for view in self.views:
            for layer in {f.get("layer") for f in view.flags}:
                counts[str(layer)] = counts.get(str(layer), 0) + 1
        return [
            _LayerRow(
                key, layer, f"report/layers/{self.layer_pages[index]}.html", counts.get(key, 0)
            )
            for index, (key, layer) in enumerate(self.layers)
        ]

    def _flag_summary(self, flags: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[_Link]]]:
        """The run's flags by kind: each flagged layer with its page across images, if any."""
        by_kind: dict[str, list[str]] = {}
        for flag in flags:
            by_kind.setdefault(str(flag.get("kind")), []).append(str(flag.get("layer")))
        summary = []
        for kind, names in by_kind.items():
            links: list[_Link] = []
            for key in dict.fromkeys(names):
                index = self.layer_index.get(key)
                page = None
                if self.folder and index is not None:
                    page = f"report/layers/{self.layer_pages[index]}.html"
                links.append((key, page))
            summary.append((kind, links))
        return summary

    def _image_stats(self, image: Mapping[str, Any]) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = (self.stats.get("images") or {}).get(
            str(image.get("out_dir", ""))
        )
        return found


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

    path: object
    page: str
    thumbnail: str | None
    top: Mapping[str, Any] | None
    kinds: list[str]
    first_nonfinite: object


@dataclass(frozen=True)
class _LayerRow:
    """One layer in the index of a folder run."""

    key: str
    layer: Mapping[str, Any]
    page: str
    flagged: int


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
    """One image's lookups, made once per report rather than once per layer and page: its
    ``stats.json`` rows by layer, its flags' kinds and messages by layer, and where each
    layer sits in its manifest entry."""

    def __init__(self, image: Mapping[str, Any], stats: Mapping[str, Any] | None) -> None:
        self.stats = stats
        self.layers: list[Mapping[str, Any]] = list(stats.get("layers") or []) if stats else []
        self.flags: list[Mapping[str, Any]] = list(stats.get("flags") or []) if stats else []
        self.rows = by_name(self.layers)
        self.kinds: dict[str, list[str]] = {}
        self.messages: dict[str, list[Any]] = {}
        for flag in self.flags:
            layer = str(flag.get("layer"))
            self.kinds.setdefault(layer, []).append(str(flag.get("kind")))
            self.messages.setdefault(layer, []).append(flag.get("message", ""))
        self.positions: dict[str, tuple[int, Mapping[str, Any]]] = {}
        for position, entry in enumerate(image.get("layers") or []):
            self.positions.setdefault(str(entry.get("name", "")), (position, entry))


def _layer_order(images: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every layer key in capture order, first seen first, with its first entry."""
    seen: dict[str, Mapping[str, Any]] = {}
    for image in images:
        for entry in image.get("layers") or []:
            seen.setdefault(str(entry.get("name", "")), entry)
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
