"""The pages of the linked images and of the layers: an image's page (its predictions, depth
chart and one section per layer) and a layer's page (its summary over the whole folder and
the grids of the linked images)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actviz.report.blocks import weights_banner
from actviz.report.inputs import PER_IMAGE_CHARTS, RUN_CHART
from actviz.report.markup import render
from actviz.report.site import Site

__all__ = ["image_body", "image_page", "layer_page"]


def image_page(site: Site, index: int) -> bytes:
    """The page of the linked image ``index``, with links to the pages before and after."""
    return render(
        "image.html",
        manifest=site.m,
        banner=weights_banner(site.m),
        previous=f"{site.slugs[index - 1]}.html" if index > 0 else None,
        next=f"{site.slugs[index + 1]}.html" if index + 1 < len(site.slugs) else None,
        body=image_body(site, index, "../../"),
    )


def layer_page(site: Site, index: int, key: str) -> bytes:
    """The page of the layer ``key`` (the ``index``-th): its summary over the whole folder and
    its grid in each linked image."""
    pages = site.layer_pages
    run = site.stats.get("run")
    summary = site.run_rows.get(key)
    cards = []
    for image, view, slug in zip(site.images, site.views, site.slugs, strict=True):
        found = view.positions.get(key)
        if found is not None:
            position, entry = found
            kinds = view.kinds.get(key, [])
            page = f"../images/{slug}.html"
            cards.append(_Card(image, page, position, entry, kinds, view.rows.get(key)))
    flags = (site.stats.get("flags") or {}).get("layers") or []
    return render(
        "layer.html",
        manifest=site.m,
        banner=weights_banner(site.m),
        previous=f"{pages[index - 1]}.html" if index > 0 else None,
        next=f"{pages[index + 1]}.html" if index + 1 < len(pages) else None,
        key=key,
        layer=site.layers[index][1],
        number=index + 1,
        count=len(site.layers),
        run_row=summary,
        across=(summary or {}).get("across_images") or {},
        images=(summary or {}).get("images"),
        flagged=[
            (
                str(f.get("kind", "")),
                int(f.get("images") or 0),
                str(f.get("first", "")),
                site.image_link(str(f.get("first", "")), "../../"),
            )
            for f in flags
            if str(f.get("layer")) == key
        ],
        run_flags=[f for f in run.get("flags", []) if f.get("layer") == key] if run else [],
        cards=cards,
        total=site.drawn,
    )


def image_body(site: Site, index: int, base: str) -> _ImageBody:
    """What the page of the linked image ``index`` shows below its title, its links made
    relative to ``base`` (a run of one image shows it on the index)."""
    image, view, slug = site.images[index], site.views[index], site.slugs[index]
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
                across=site.layer_page_of(key),
            )
        )
    return _ImageBody(
        image=image,
        base=base,
        chart=chart if chart in site.charts else None,
        # An image without a chart of its own shows the run's and says why.
        shared_chart=bool(view.layers),
        run_chart=RUN_CHART if site.run_chart else None,
        per_image_charts=PER_IMAGE_CHARTS,
        first_nonfinite=str(first) if first else None,
        first_anchor=f"L{found[0]}" if found else "",
        layers=layers,
        rows=view.rows,
        kinds=view.kinds,
        sections=sections,
    )


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
class _Card:
    """One image's card on a layer's page."""

    image: Mapping[str, Any]
    page: str
    position: int
    entry: Mapping[str, Any]
    kinds: list[str]
    row: Mapping[str, Any] | None
