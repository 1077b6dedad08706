"""One card: what a notebook cell shows of a result, as escaped HTML of a bounded size, and its
one-line plain text.

A card is plain data (facts, warnings, flags, one small table, thumbnails, links). Every part is
capped (rows, thumbnails, characters, and the thumbnails' bytes together), so a card of a run of
20,000 images is as small as one of three: the folder and its report hold the rest.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CARD_MAX_BYTES",
    "MAX_FLAGS",
    "MAX_ROWS",
    "MAX_THUMBS",
    "Card",
    "Table",
    "Thumb",
    "clip_text",
    "href",
]

#: Table rows a card shows at most; the rest are counted ("and 480 more").
MAX_ROWS = 12
#: Thumbnails a card shows at most.
MAX_THUMBS = 6
#: Warnings and flag lines a card shows at most.
MAX_FLAGS = 6
#: Characters of one text (a warning, a cell) at most.
MAX_TEXT = 240
#: The thumbnails' data URIs together, at most (a card leaves the rest out).
THUMB_BUDGET = 240_000
#: What a card's HTML stays under, whatever it shows.
CARD_MAX_BYTES = 320_000

_BOX = (
    "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4;"
    "border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;max-width:820px;"
    "background:#fff;color:#1f2328"
)
_WARN = "color:#9a3b00;background:#fff4e5;padding:2px 6px;border-radius:4px;margin:2px 0"
_FLAG = "color:#a40e26;margin:2px 0"
_CELL = "padding:1px 8px 1px 0;text-align:left;vertical-align:top"
_HEAD = "padding:1px 8px 1px 0;text-align:left;color:#57606a;font-weight:600"
_MUTED = "color:#57606a"


def clip_text(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    value = str(text)
    return value if len(value) <= limit else value[: limit - 1] + "\u2026"


def _e(text: object, limit: int = MAX_TEXT) -> str:
    return html.escape(clip_text(text, limit), quote=True)


def href(path: Path | str) -> str:
    """A link to a file: relative to the working folder when it lies under it (Jupyter serves
    the files beside the notebook, its kernel's working folder), else a ``file://`` URI."""
    target = Path(path)
    if not target.is_absolute():
        return target.as_posix()
    try:
        return target.relative_to(Path.cwd()).as_posix()
    except ValueError:  # outside the working folder (or on another drive)
        return target.as_uri()


@dataclass(frozen=True)
class Thumb:
    """One inline picture: a PNG data URI and its size in pixels."""

    label: str
    uri: str
    width: int
    height: int


@dataclass
class Table:
    """A small table: its rows beyond :data:`MAX_ROWS` are counted, not shown."""

    headers: Sequence[str]
    rows: Sequence[Sequence[object]] = field(default_factory=list)
    total: int | None = None
    """How many rows there are in all (default: ``len(rows)``)."""
    noun: str = "rows"

    def html(self) -> str:
        head = "".join(f'<th style="{_HEAD}">{_e(h)}</th>' for h in self.headers)
        body = []
        for row in self.rows[:MAX_ROWS]:
            cells = "".join(f'<td style="{_CELL}">{_e(c, 80)}</td>' for c in row)
            body.append(f"<tr>{cells}</tr>")
        total = len(self.rows) if self.total is None else self.total
        more = ""
        if total > min(len(self.rows), MAX_ROWS):
            more = (
                f'<div style="{_MUTED}">{total - min(len(self.rows), MAX_ROWS):,} more '
                f"{_e(self.noun)}</div>"
            )
        return (
            f'<table style="border-collapse:collapse;margin:4px 0"><thead><tr>{head}</tr>'
            f"</thead><tbody>{''.join(body)}</tbody></table>{more}"
        )


@dataclass
class Card:
    """What a cell shows of a result.

    Attributes:
        kind: What made it (``run``, ``top-images``, ``diff``...), the card's first word.
        title: What it is about (the model).
        summary: The plain one-line text (``__repr__``).
        facts: ``(name, value)`` lines under the title.
        warnings: Shown boxed (random weights first).
        flags: Anomalies, one line each (where the first NaN came from first).
        table: A small table (layers, most often).
        thumbs: Inline pictures.
        more_thumbs: Pictures left out of the card (for the caption).
        links: ``(label, path)`` of files to open.
    """

    kind: str
    title: str
    summary: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    table: Table | None = None
    thumbs: list[Thumb] = field(default_factory=list)
    more_thumbs: int = 0
    links: list[tuple[str, str]] = field(default_factory=list)
    extra_html: str = ""
    """Markup made here (a small chart), placed after the table; never user text."""

    def html(self) -> str:
        """The card as HTML: escaped, inline styles only (notebook front ends strip
        ``<style>``), under :data:`CARD_MAX_BYTES`."""
        parts = [
            f'<div class="actviz-card" style="{_BOX}">',
            f'<div style="font-weight:600;font-size:14px">actviz {_e(self.kind)} '
            f"&middot; {_e(self.title)}</div>",
        ]
        # Warnings (random weights first) right under the title, where the eye lands.
        parts.extend(
            f'<div class="actviz-warning" style="{_WARN}">&#9888; {_e(w)}</div>'
            for w in self.warnings[:MAX_FLAGS]
        )
        if len(self.warnings) > MAX_FLAGS:
            parts.append(
                f'<div style="{_MUTED}">{len(self.warnings) - MAX_FLAGS} more warnings</div>'
            )
        if self.facts:
            rows = "".join(
                f'<tr><td style="{_HEAD}">{_e(k)}</td><td style="{_CELL}">{_e(v)}</td></tr>'
                for k, v in self.facts[:MAX_ROWS]
            )
            parts.append(f'<table style="border-collapse:collapse;margin:4px 0">{rows}</table>')
        parts.extend(
            f'<div class="actviz-flag" style="{_FLAG}">&#9873; {_e(f)}</div>'
            for f in self.flags[:MAX_FLAGS]
        )
        if len(self.flags) > MAX_FLAGS:
            parts.append(f'<div style="{_MUTED}">{len(self.flags) - MAX_FLAGS} more flags</div>')
        if self.table is not None:
            parts.append(self.table.html())
        parts.append(self.extra_html)
        parts.append(self._thumbs_html())
        if self.links:
            links = " &middot; ".join(
                f'<a href="{_e(path, 1000)}" target="_blank">{_e(label)}</a>'
                for label, path in self.links[:MAX_FLAGS]
            )
            parts.append(f'<div style="margin-top:4px">{links}</div>')
        parts.append("</div>")
        return "".join(parts)

    def _thumbs_html(self) -> str:
        shown, spent = [], 0
        for thumb in self.thumbs[:MAX_THUMBS]:
            if spent + len(thumb.uri) > THUMB_BUDGET:
                break
            spent += len(thumb.uri)
            shown.append(
                '<figure style="display:inline-block;margin:4px 8px 4px 0;vertical-align:top">'
                f'<img src="{thumb.uri}" width="{thumb.width}" height="{thumb.height}" '
                f'alt="{_e(thumb.label)}" style="image-rendering:auto;border:1px solid #eee">'
                f'<figcaption style="{_MUTED};font-size:11px;max-width:{max(thumb.width, 80)}px;'
                f'overflow:hidden;text-overflow:ellipsis;white-space:nowrap">'
                f"{_e(thumb.label, 60)}</figcaption></figure>"
            )
        left = len(self.thumbs) - len(shown) + self.more_thumbs
        more = f'<div style="{_MUTED}">{left:,} more pictures in the folder</div>' if left else ""
        return (f"<div>{''.join(shown)}</div>" if shown else "") + more

    def text(self) -> str:
        """The one-line plain text."""
        return clip_text(self.summary, 400)
