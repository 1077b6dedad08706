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
- ``report/run_depth.png``: the run's depth chart, pooled over all images.
- ``report/depth/<image>.png``: an image's own depth chart, drawn for every image with an
  anomaly flag and for the first :data:`PER_IMAGE_CHARTS` images of the run. A chart costs
  tens of milliseconds of matplotlib, which for hundreds of images would be as long as drawing
  the pictures themselves; the page of any other image shows the run's chart instead and
  says so, and that image's numbers stay in its layer table and in ``stats.json``.

Every page is self-contained (inline CSS, one tiny inline script for the image filter) and
uses relative links only. Names come from the model and the file system, so every one is
HTML-escaped, and every URL is percent-encoded. Grids load lazily and sections off screen
skip layout (``content-visibility``), so a run of hundreds of images stays responsive.

This module decides which pages there are and how they link to each other. The blocks they
are made of come from :mod:`actviz.report.blocks`, the page shell, stylesheet, escaping and
links from :mod:`actviz.report.markup`, and the depth charts from :mod:`actviz.report.charts`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actviz.output import safe_name
from actviz.report.blocks import (
    by_name,
    failed_tables,
    flag_list,
    layer_pictures,
    layer_table,
    run_meta,
    run_warnings,
    stats_table,
    summary_line,
    weights_banner,
)
from actviz.report.charts import DepthChart
from actviz.report.markup import badges, esc, html_page, image_tag, link_to, pct, shape_text, url

__all__ = ["PER_IMAGE_CHARTS", "build_report"]

PER_IMAGE_CHARTS = 12
"""How many of a run's first images get a depth chart of their own even without a flag.

Every image with at least one anomaly flag gets its chart too, wherever it comes in the run.
The others share the run's chart: a run of one image keeps its chart, a folder of hundreds
costs a dozen charts plus its flagged images rather than one chart per image.
"""

_OK = ("ok", "reused")
_RUN_CHART = "report/run_depth.png"

# The filter box of the image index: hide rows whose text does not contain the query.
_FILTER_JS = (
    "document.getElementById('filter').addEventListener('input',function(e){"
    "var q=e.target.value.toLowerCase();"
    "document.querySelectorAll('#images tbody tr').forEach(function(r){"
    "r.hidden=q&&r.textContent.toLowerCase().indexOf(q)<0;});});"
)


def build_report(
    manifest: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    *,
    out_dir_name: str = ".",
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

    Returns:
        Paths relative to the output folder (``index.html``, ``report/...``) -> file content.
        ``index.html`` belongs at the output folder's root, beside the image folders.
    """
    report = _Report(manifest, stats, out_dir_name)
    return report.build()


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

    # ------------------------------------------------------------------ pages

    def build(self) -> dict[str, bytes]:
        for number, (image, view, slug) in enumerate(
            zip(self.images, self.views, self.slugs, strict=True)
        ):
            if view.layers and (number < PER_IMAGE_CHARTS or view.flags):
                self.files[f"report/depth/{slug}.png"] = self.chart.render(
                    view.layers, view.flags, str(image.get("path", ""))
                )
        run = self.stats.get("run")
        if run and run.get("layers"):
            self.files[_RUN_CHART] = self.chart.render(
                run["layers"], run.get("flags", []), "all images, pooled"
            )
        if self.folder:
            for index, (image, slug) in enumerate(zip(self.images, self.slugs, strict=True)):
                self.files[f"report/images/{slug}.html"] = self._image_page(index, image, slug)
            for index, (key, _) in enumerate(self.layers):
                page = f"report/layers/{self.layer_pages[index]}.html"
                self.files[page] = self._layer_page(index, key)
        self.files["index.html"] = self._index()
        return self.files

    def _index(self) -> bytes:
        m = self.m
        parts = [
            f"<h1>{esc(m.get('model', '?'))}</h1>",
            f'<p class="muted">actviz report of <code>{esc(self.name)}</code>'
            f" &middot; {esc(m.get('created', ''))}</p>",
            weights_banner(self.m),
            *(f'<div class="warn">{esc(w)}</div>' for w in run_warnings(self.m)),
            "<h2>Run</h2>",
            run_meta(
                self.m, layers=len(self.layers), drawn=len(self.images), failed=len(self.failed)
            ),
        ]
        run = self.stats.get("run")
        if _RUN_CHART in self.files:
            parts.append("<h2>Depth profile</h2>")
            parts.append(image_tag(_RUN_CHART, "depth profile of the run", "chart", ""))
            parts.append(self._flag_summary(run.get("flags", []) if run else []))
        if self.folder:
            parts.append(self._image_index())
            parts.append(self._layer_index())
        elif self.images:
            parts.append(f"<h2>Image <code>{esc(self.images[0].get('path', ''))}</code></h2>")
            parts.append(self._image_body(0, ""))
        parts.append(failed_tables(self.failed, self.m.get("skipped") or []))
        script = _FILTER_JS if self.folder else ""
        return html_page(f"actviz · {m.get('model', '')} · {self.name}", "".join(parts), script)

    def _image_page(self, index: int, image: Mapping[str, Any], slug: str) -> bytes:
        base = "../../"
        nav = [f'<a href="{base}index.html">&larr; all images</a>']
        if index > 0:
            nav.append(link_to(f"{self.slugs[index - 1]}.html", "previous"))
        if index + 1 < len(self.slugs):
            nav.append(link_to(f"{self.slugs[index + 1]}.html", "next"))
        body = (
            f'<div class="nav">{" &middot; ".join(nav)}</div>'
            f"<h1><code>{esc(image.get('path', ''))}</code></h1>"
            f'<p class="muted">{esc(self.m.get("model", ""))}</p>'
            f"{weights_banner(self.m)}{self._image_body(index, base)}"
        )
        return html_page(f"actviz · {image.get('path', '')}", body)

    def _layer_page(self, index: int, key: str) -> bytes:
        base = "../../"
        layer = self.layers[index][1]
        nav = [f'<a href="{base}index.html">&larr; index</a>']
        if index > 0:
            nav.append(link_to(f"{self.layer_pages[index - 1]}.html", "previous layer"))
        if index + 1 < len(self.layers):
            nav.append(link_to(f"{self.layer_pages[index + 1]}.html", "next layer"))
        parts = [
            f'<div class="nav">{" &middot; ".join(nav)}</div>',
            f"<h1><code>{esc(key)}</code></h1>",
            f'<p class="muted">{esc(layer.get("type", ""))} &middot; layer {index + 1} of '
            f"{len(self.layers)} &middot; {esc(self.m.get('model', ''))}</p>",
            weights_banner(self.m),
        ]
        run = self.stats.get("run")
        if run:
            row = by_name(run.get("layers", [])).get(key)
            flags = [f for f in run.get("flags", []) if f.get("layer") == key]
            if row:
                parts.append("<h2>All images</h2>" + stats_table(row))
            parts.append(flag_list(flags))
        cards = []
        for image, view, slug in zip(self.images, self.views, self.slugs, strict=True):
            found = view.positions.get(key)
            if found is None:
                continue
            position, entry = found
            row = view.rows.get(key)
            kinds = view.kinds.get(key, [])
            summary = summary_line(row) if row else ""
            link = link_to(f"../images/{slug}.html", image.get("path", ""), f"L{position}")
            cards.append(
                f'<div class="card"><div><code>{link}</code> {badges(kinds)}</div>'
                f'<div class="muted">{summary}</div>{layer_pictures(entry, base)}</div>'
            )
        parts.append(f'<h2>Each image</h2><div class="cards">{"".join(cards)}</div>')
        return html_page(f"actviz · {key}", "".join(parts))

    # ------------------------------------------------------------------ linked blocks

    def _image_body(self, index: int, base: str) -> str:
        image, view, slug = self.images[index], self.views[index], self.slugs[index]
        head = []
        if image.get("thumbnail"):
            head.append(image_tag(base + image["thumbnail"], "input image", "thumb", ""))
        preds = image.get("predictions") or []
        if preds:
            rows = "".join(
                f"<tr><td>{esc(p.get('label') or '')}</td><td class=n>{esc(p.get('index'))}</td>"
                f"<td class=n>{pct(p.get('probability'))}</td></tr>"
                for p in preds
            )
            head.append(
                "<table style='width:auto'><thead><tr><th>prediction</th><th class=n>class"
                f"</th><th class=n>probability</th></tr></thead><tbody>{rows}</tbody></table>"
            )
        size = image.get("size")
        if size:
            head.append(f'<p class="muted">{esc(size[0])} &times; {esc(size[1])} pixels</p>')
        parts = [f'<div class="head">{"".join(head)}</div>']
        flags, rows_by_name = view.flags, view.rows
        chart = f"report/depth/{slug}.png"
        if chart in self.files:
            parts.append("<h2>Depth profile</h2>")
            parts.append(image_tag(base + chart, "depth profile of this image", "chart", ""))
        elif view.layers:
            parts.append("<h2>Depth profile</h2>" + self._shared_chart(base))
        first = view.stats.get("first_nonfinite") if view.stats else None
        if first:
            found = view.positions.get(str(first))
            anchor = f"L{found[0]}" if found else ""
            parts.append(
                f'<div class="banner">Non-finite values first appear in '
                f"<a href='#{anchor}'><code>{esc(first)}</code></a></div>"
            )
        layers = image.get("layers") or []
        parts.append("<h2>Layers</h2>" + layer_table(layers, rows_by_name, flags))
        total = len(layers)
        for position, entry in enumerate(layers):
            key = entry.get("name", "")
            kinds = view.kinds.get(key, [])
            messages = view.messages.get(key, [])
            row = rows_by_name.get(key)
            marker = 100 * position / max(total - 1, 1)
            shown = (
                f"{esc(entry.get('channels_shown'))} of {esc(entry.get('channels_total'))} "
                "channels shown"
            )
            extra = "".join(
                f" &middot; {label} {esc(entry[field])}"
                for field, label in (("kind", ""), ("layout", "layout"))
                if entry.get(field) and entry.get(field) != "output"
            )
            across = ""
            if self.folder and key in self.layer_index:
                page = self.layer_pages[self.layer_index[key]]
                across = " &middot; " + link_to(f"{base}report/layers/{page}.html", "across images")
            parts.append(
                f'<section class="layer{" flagged" if kinds else ""}" id="L{position}">'
                f'<h3><span class="muted">#{position}</span><code>{esc(key)}</code>'
                f'<span class="muted">{esc(entry.get("type", ""))}</span>{badges(kinds)}</h3>'
                f'<div class="depth" title="layer {position + 1} of {total}">'
                f'<span style="left:{marker:.1f}%"></span></div>'
                f'<div class="muted">shape {esc(shape_text(entry.get("shape")))} &middot; {shown}'
                f"{extra}{across}</div>"
                + (stats_table(row) if row else "")
                + (
                    '<ul class="flags">' + "".join(f"<li>{esc(t)}</li>" for t in messages) + "</ul>"
                    if messages
                    else ""
                )
                + layer_pictures(entry, base)
                + "</section>"
            )
        return "".join(parts)

    def _shared_chart(self, base: str) -> str:
        """What an image page without a chart of its own shows instead: the run's chart."""
        charted = (
            f"Depth charts of single images are drawn only for images with a flag and for the "
            f"first {PER_IMAGE_CHARTS} of the run; this image has no flag, so "
        )
        numbers = (
            " Its own numbers, layer by layer, are in the table below and in "
            "<code>stats.json</code>."
        )
        if _RUN_CHART not in self.files:
            return f'<p class="muted">{charted}no chart is shown here.{numbers}</p>'
        return (
            f'<p class="muted">{charted}the chart below is the run\'s, pooled over all images.'
            f"{numbers}</p>"
            + image_tag(
                base + _RUN_CHART, "depth profile of the run, pooled over all images", "chart", ""
            )
        )

    def _image_index(self) -> str:
        rows = []
        for number, (image, slug) in enumerate(zip(self.images, self.slugs, strict=True)):
            thumb = ""
            if image.get("thumbnail"):
                thumb = image_tag(image["thumbnail"], "", "mini", "")
            preds = image.get("predictions") or []
            top = ""
            if preds:
                p = preds[0]
                top = f"{esc(p.get('label') or p.get('index'))} ({pct(p.get('probability'))})"
            view = self.views[number]
            kinds = sorted({str(f.get("kind", "")) for f in view.flags})
            first = view.stats.get("first_nonfinite") if view.stats else None
            rows.append(
                f"<tr><td class=n>{number + 1}</td><td>{thumb}</td>"
                f"<td>{link_to(f'report/images/{slug}.html', image.get('path', ''))}</td>"
                f"<td>{top}</td><td>{badges(kinds)}</td>"
                f"<td>{f'<code>{esc(first)}</code>' if first else ''}</td></tr>"
            )
        return (
            f"<h2>Images ({len(self.images)})</h2>"
            '<input type="search" id="filter" placeholder="Filter images" aria-label="filter">'
            '<table id="images"><thead><tr><th class=n>#</th><th></th><th>image</th>'
            "<th>top prediction</th><th>flags</th><th>first NaN/Inf</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )

    def _layer_index(self) -> str:
        counts: dict[str, int] = {}
        for view in self.views:
            for layer in {f.get("layer") for f in view.flags}:
                counts[str(layer)] = counts.get(str(layer), 0) + 1
        rows = []
        for index, (key, layer) in enumerate(self.layers):
            page = f"report/layers/{self.layer_pages[index]}.html"
            flagged = counts.get(key, 0)
            rows.append(
                f"<tr{' class=flagged' if flagged else ''}><td class=n>{index}</td>"
                f"<td><code>{link_to(page, key)}</code></td><td>{esc(layer.get('type', ''))}</td>"
                f"<td>{esc(shape_text(layer.get('shape')))}</td>"
                f"<td class=n>{flagged or ''}</td></tr>"
            )
        return (
            "<h2>Layers across images</h2><table><thead><tr><th class=n>#</th><th>layer</th>"
            "<th>type</th><th>shape</th><th class=n>images flagged</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )

    def _flag_summary(self, flags: Sequence[Mapping[str, Any]]) -> str:
        """The run's flags by kind, each layer linked to its page across images."""
        by_kind: dict[str, list[str]] = {}
        for flag in flags:
            by_kind.setdefault(str(flag.get("kind")), []).append(str(flag.get("layer")))
        rows = []
        for kind, names in by_kind.items():
            links = []
            for key in dict.fromkeys(names):
                index = self.layer_index.get(key)
                text = f"<code>{esc(key)}</code>"
                if self.folder and index is not None:
                    page = f"report/layers/{self.layer_pages[index]}.html"
                    text = f'<a href="{url(page)}">{text}</a>'
                links.append(text)
            rows.append(f"<tr><td>{badges([kind])}</td><td>{', '.join(links)}</td></tr>")
        if not rows:
            return '<p class="muted">No layer is flagged over the whole run.</p>'
        return (
            "<table style='width:auto'><thead><tr><th>flag</th><th>layers (pooled over all "
            f"images)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )

    @functools.cached_property
    def chart(self) -> DepthChart:
        return DepthChart()

    def _image_stats(self, image: Mapping[str, Any]) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = (self.stats.get("images") or {}).get(
            str(image.get("out_dir", ""))
        )
        return found


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
