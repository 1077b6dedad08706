"""The HTML building blocks of the report: the page shell, its stylesheet, escaping and links.

Every name shown in the report comes from the model or the file system, so every piece of text
goes through :func:`esc` and every relative path through :func:`url` (links, images) before it
reaches a page. :func:`html_page` wraps a body in a complete, self-contained page: inline CSS,
no external resource, so it opens from disk without a network.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from actviz._version import __version__

__all__ = [
    "badges",
    "esc",
    "html_page",
    "image_tag",
    "link_to",
    "num",
    "pct",
    "shape_text",
    "url",
]

# Flags that mean the numbers themselves are broken get the red badge, the others amber.
_SEVERE = frozenset({"nan", "inf", "exploding"})

_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d9dee3;--soft:#f4f6f8;--bad:#b3261e;
--badbg:#fdecea;--warn:#7a4a00;--warnbg:#fff4e0;--link:#0a58ca}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1200px;margin:0 auto;padding:20px 24px 48px}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:24px;margin:4px 0 2px}h2{font-size:19px;margin:28px 0 8px}
h3{font-size:16px;margin:0 0 4px;display:flex;flex-wrap:wrap;gap:6px;align-items:baseline}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
h1 code{font-size:20px}h3 code{font-size:15px}
.muted{color:var(--muted)}.nav{font-size:14px;margin-bottom:8px}
.banner{background:var(--badbg);border:2px solid var(--bad);color:var(--bad);
border-radius:6px;padding:10px 14px;margin:12px 0;font-weight:600}
.warn{background:var(--warnbg);border-left:4px solid #e0a030;padding:8px 12px;margin:12px 0}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 18px;margin:8px 0}
dl.meta dt{color:var(--muted)}dl.meta dd{margin:0}
table{border-collapse:collapse;width:100%;font-size:13px;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);font-weight:600}td.n,th.n{text-align:right}
tr.flagged td{background:#fff6f5}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;
background:var(--warnbg);color:var(--warn);border:1px solid #f0cf94}
.badge.severe{background:var(--badbg);color:var(--bad);border-color:#f1b5b0}
.chart{max-width:100%;height:auto;border:1px solid var(--line);border-radius:4px}
section.layer{border-top:1px solid var(--line);padding:16px 0;content-visibility:auto;
contain-intrinsic-size:auto 640px}
section.layer.flagged{border-left:4px solid var(--bad);padding-left:12px}
.depth{position:relative;height:6px;background:var(--soft);border-radius:3px;margin:6px 0 8px;
max-width:360px}.depth span{position:absolute;top:-3px;width:4px;height:12px;
border-radius:2px;background:var(--link)}
section.flagged .depth span{background:var(--bad)}
img.grid{display:block;max-width:100%;height:auto;min-height:40px;margin-top:8px;
background:#262626;border-radius:3px}
img.overlay{max-width:min(100%,448px);height:auto;margin-top:8px;border-radius:3px}
img.thumb{max-width:224px;max-height:224px;border:1px solid var(--line);border-radius:4px}
img.mini{max-width:64px;max-height:48px;vertical-align:middle}
.head{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:18px}
.card{border:1px solid var(--line);border-radius:6px;padding:10px;content-visibility:auto;
contain-intrinsic-size:auto 420px}
ul.flags{margin:4px 0;padding-left:20px;font-size:13px}
input[type=search]{font:inherit;padding:4px 8px;width:100%;max-width:360px;margin:4px 0 8px}
footer{margin-top:40px;color:var(--muted);font-size:12px}
"""


def html_page(title: str, body: str, script: str = "") -> bytes:
    """A complete UTF-8 page: ``title`` (escaped here), ``body`` (HTML already), a footer.

    ``script``, when given, is inlined at the end of the body.
    """
    tail = f"<script>{script}</script>" if script else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><main>{body}"
        f"<footer>Made with actviz {esc(__version__)}; open from disk, no network needed."
        f"</footer></main>{tail}</body></html>\n"
    ).encode()


def esc(value: object) -> str:
    """``value`` as text safe in HTML content and quoted attributes; None is empty."""
    return html.escape("" if value is None else str(value), quote=True)


def url(path: str) -> str:
    """Percent-encode a relative path, keeping its slashes: spaces, '#', '?', '%', quotes
    and non-ASCII names then survive as URLs, and nothing in it can read as a scheme."""
    return quote(path, safe="/")


def link_to(path: str, text: object, fragment: str = "", *, raw: bool = False) -> str:
    """A link to a relative ``path`` (and ``#fragment``); ``text`` is escaped unless ``raw``."""
    href = url(path) + (f"#{quote(fragment)}" if fragment else "")
    return f'<a href="{href}">{text if raw else esc(text)}</a>'


def image_tag(path: str, alt: str, cls: str, extra: str) -> str:
    """A lazily loaded ``<img>`` of class ``cls``; ``extra`` holds further attributes, raw."""
    return (
        f'<img class="{cls}" src="{url(path)}" alt="{esc(alt)}" loading="lazy" '
        f'decoding="async"{extra}>'
    )


def badges(kinds: Iterable[str]) -> str:
    """One badge per distinct flag kind, in order; severe kinds in red."""
    return "".join(
        f'<span class="badge{" severe" if k in _SEVERE else ""}">{esc(k)}</span>'
        for k in dict.fromkeys(kinds)
    )


def num(value: Any) -> str:
    """A statistic with 4 significant digits; a dash for None (NaN in ``stats.json``)."""
    if value is None:
        return "&ndash;"
    if isinstance(value, int):
        return str(value)
    # Digits, sign, point, exponent, inf or nan: nothing there to escape.
    return f"{float(value):.4g}"


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal; a dash for None."""
    return "&ndash;" if value is None else f"{float(value):.1%}"


def shape_text(shape: Any) -> str:
    """A tensor shape as ``(1, 64, 56, 56)``; ``?`` when unknown."""
    return "(" + ", ".join(str(s) for s in shape) + ")" if shape else "?"
