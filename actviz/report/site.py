"""What every page of a run report shares: the linked images, the layers, the file name of
each page, and how one page links to another."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actviz.output import order_width, safe_name
from actviz.report.blocks import by_name
from actviz.report.inputs import LISTED, OK, ReportImages

__all__ = ["ImageView", "Site", "flag_kinds", "index_page_path"]


class Site:
    """The pages of one run and how they link; one instance per iteration of the report's
    pages. ``charts`` and ``run_chart`` say which depth charts were written, as they are."""

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
        self.images = [im for im in linked if im.get("status") in OK]
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
        width = order_width(len(self.layers))
        self.layer_pages = _unique_slugs(
            f"{i:0{width}d}_{key}" for i, (key, _) in enumerate(self.layers)
        )
        self.layer_index = {key: i for i, (key, _) in enumerate(self.layers)}
        self.views = [ImageView(image) for image in self.images]
        self.charts: set[str] = set()
        self.run_chart = False

    def image_link(self, key: str, base: str = "") -> str | None:
        """The page of the image ``key``, or its output folder when it has no page."""
        page = self.pages.get(key)
        if page is not None:
            return base + page
        return f"{base}{key}/" if self.input.folders and key else None

    def layer_page_of(self, key: str, base: str = "") -> str | None:
        """The page of the layer ``key`` across images (folder runs only)."""
        index = self.layer_index.get(key)
        if not self.folder or index is None:
            return None
        return f"{base}report/layers/{self.layer_pages[index]}.html"


def index_page_path(number: int) -> str:
    """The file of the image index's page ``number`` (from 2; the first is ``index.html``)."""
    return f"report/index/{number:03d}.html"


def flag_kinds(flags: object) -> list[str]:
    """Flag kinds from a row's ``"flags"``: kind names, or flag records."""
    if not isinstance(flags, list | tuple):
        return []
    return sorted({str(f.get("kind")) if isinstance(f, Mapping) else str(f) for f in flags})


class ImageView:
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
