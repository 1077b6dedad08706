"""The index of a run report: ``index.html`` (the run, its depth profile, per-layer
summaries, flags with the worst images of each kind, failed and skipped inputs, the first
page of the image index) and the further pages of the image index, made as the rows stream
by."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actviz.report.blocks import run_meta, run_warnings, weights_banner
from actviz.report.inputs import LISTED, OK, PAGE_ROWS, RUN_CHART
from actviz.report.linked_pages import image_body
from actviz.report.markup import render
from actviz.report.site import Site, flag_kinds, index_page_path

__all__ = ["index_pages"]


def index_pages(site: Site) -> Iterator[tuple[str, bytes]]:
    """``index.html`` with the first page of the image index, then the further pages of
    it, each made from :data:`PAGE_ROWS` rows as the stream goes by."""
    rows = iter(site.input.rows()) if site.folder else iter(())
    pages = max(1, math.ceil(site.input.total / PAGE_ROWS))
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
            yield "index.html", _index(site, chunk, more, pages)
        else:
            yield index_page_path(number), _index_page(site, number, chunk, start, more, pages)
        if not more:
            return
        number += 1


def _pager(number: int, more: bool, pages: int, base: str) -> _Pager:
    def page(n: int) -> str:
        if n == 1:
            return f"{base}index.html"
        # From a further page, the others are beside it.
        return f"{n:03d}.html" if base else index_page_path(n)

    return _Pager(
        number=number,
        pages=pages,
        previous=page(number - 1) if number > 1 else None,
        next=page(number + 1) if more else None,
    )


def _index(site: Site, chunk: list[Mapping[str, Any]], more: bool, pages: int) -> bytes:
    run = site.stats.get("run")
    single = image_body(site, 0, "") if site.images and not site.folder else None
    skipped = list(site.m.get("skipped") or [])
    tables = site.stats.get("images") if site.stats.get("format", 1) >= 2 else None
    tables = tables if isinstance(tables, Mapping) else {}
    return render(
        "index.html",
        manifest=site.m,
        name=site.name,
        banner=weights_banner(site.m),
        warnings=run_warnings(site.m),
        meta=run_meta(site.m, layers=len(site.layers), drawn=site.drawn, failed=site.input.failed),
        run_chart=RUN_CHART if site.run_chart else None,
        flag_summary=_flag_summary(site, run.get("flags", []) if run else []),
        worst=_worst(
            site,
        )
        if site.folder
        else [],
        nonfinite=_nonfinite(
            site,
        )
        if site.folder
        else [],
        folder=site.folder,
        total=site.input.total,
        linked=len(site.images),
        drawn=site.drawn,
        folders=site.input.folders,
        table=tables.get("table"),
        csv=tables.get("csv") if tables.get("table") else None,
        summaries=bool(site.run_rows),
        images=_image_rows(site, chunk, 0, ""),
        paging=_pager(1, more, pages, ""),
        layers=_layer_rows(
            site,
        )
        if site.folder
        else [],
        single=single,
        failed=site.failed,
        failed_total=site.input.failed,
        skipped=skipped[:LISTED],
        skipped_total=len(skipped),
        related=site.related,
    )


def _index_page(
    site: Site, number: int, chunk: list[Mapping[str, Any]], start: int, more: bool, pages: int
) -> bytes:
    return render(
        "index_page.html",
        manifest=site.m,
        name=site.name,
        banner=weights_banner(site.m),
        total=site.input.total,
        first=start + 1,
        last=start + len(chunk),
        images=_image_rows(site, chunk, start, "../../"),
        paging=_pager(number, more, pages, "../../"),
    )


def _image_rows(
    site: Site, chunk: Sequence[Mapping[str, Any]], start: int, base: str
) -> list[_ImageRow]:
    rows = []
    for offset, row in enumerate(chunk):
        key = str(row.get("out_dir", ""))
        status = row.get("status")
        page = site.pages.get(key)
        if page is not None:
            target: str | None = base + page
        elif status in OK and site.input.folders and key:
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
                thumbnail=base + str(thumbnail) if thumbnail and status in OK else None,
                top=row.get("prediction"),
                kinds=flag_kinds(row.get("flags")),
                failed=status == "failed",
                error=row.get("error"),
            )
        )
    return rows


def _layer_rows(site: Site) -> list[_LayerRow]:
    rows = []
    for index, (key, layer) in enumerate(site.layers):
        summary = site.run_rows.get(key)
        flagged = dict((summary or {}).get("flagged") or {})
        rows.append(
            _LayerRow(
                key=key,
                layer=layer,
                page=f"report/layers/{site.layer_pages[index]}.html",
                flagged=sorted((k, n) for k, n in flagged.items() if n),
                summary=summary,
                across=(summary or {}).get("across_images") or {},
            )
        )
    return rows


def _worst(site: Site) -> list[_Worst]:
    """Each flag kind raised in some image: how many images, and the worst of them."""
    flags = site.stats.get("flags") or {}
    counts = flags.get("images") or {}
    worst = flags.get("worst") or {}
    kinds = list(site.stats.get("flag_kinds") or []) or list(counts)
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
                        page=site.image_link(str(e.get("image", ""))),
                        layer=str(e.get("layer", "")),
                        layer_page=site.layer_page_of(str(e.get("layer", ""))),
                        message=e.get("message"),
                    )
                    for e in entries
                ],
            )
        )
    return out


def _nonfinite(site: Site) -> list[tuple[str, str | None, int, str, str | None]]:
    """Where non-finite values first appear: layer, its page, images, first image, page."""
    entries = (site.stats.get("flags") or {}).get("first_nonfinite") or []
    return [
        (
            str(e.get("layer", "")),
            site.layer_page_of(str(e.get("layer", ""))),
            int(e.get("images") or 0),
            str(e.get("first", "")),
            site.image_link(str(e.get("first", ""))),
        )
        for e in entries
    ]


def _flag_summary(site: Site, flags: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[_Link]]]:
    """The run's flags by kind: each flagged layer with its page, if any."""
    by_kind: dict[str, list[str]] = {}
    for flag in flags:
        by_kind.setdefault(str(flag.get("kind")), []).append(str(flag.get("layer")))
    return [
        (kind, [(key, site.layer_page_of(key)) for key in dict.fromkeys(names)])
        for kind, names in by_kind.items()
    ]


_Link = tuple[str, "str | None"]  # a layer's name and its page across images, if it has one


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
