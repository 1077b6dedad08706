"""The report's templates: a Jinja2 environment that escapes every value, and its filters.

The pages are Jinja2 templates in ``templates/`` beside this module (shipped as package data):
``base.html`` is the page shell with the stylesheet, ``blocks.html`` holds the blocks as
macros, and each page (``index.html``, ``image.html``, ``layer.html``) extends the shell.
Every name shown in the report comes from the model or the file system, so autoescape is on
for every template and a value reaches a page as text, never as markup; relative paths go
through the ``url`` filter before they become links or image sources. Undefined names raise
rather than print nothing, so a typo in a template fails the tests instead of blanking a page.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any
from urllib.parse import quote

import jinja2

from actviz._version import __version__

__all__ = ["STAT_COLUMNS", "environment", "num", "pct", "render", "shape_text", "url", "warm_up"]

# Flags that mean the numbers themselves are broken get the red badge, the others amber.
_SEVERE = frozenset({"nan", "inf", "exploding"})

# What the statistics table shows of a stats.json layer row: key, column head, is a fraction.
STAT_COLUMNS = (
    ("mean", "mean", False),
    ("std", "std", False),
    ("min", "min", False),
    ("p01", "p1", False),
    ("p99", "p99", False),
    ("max", "max", False),
    ("zero_frac", "zeros", True),
    ("neg_frac", "neg", True),
    ("dead_frac", "dead ch.", True),
    ("nan", "NaN", False),
    ("inf", "Inf", False),
)


def render(template: str, /, **context: Any) -> bytes:
    """Render the page ``template`` (a file name in ``templates/``) with ``context``, as UTF-8.

    A path that is not valid UTF-8 on disk reaches Python with lone surrogates in place of its
    odd bytes; those show as ``?``."""
    return environment().get_template(template).render(**context).encode("utf-8", "replace")


@functools.cache
def environment() -> jinja2.Environment:
    """The one environment of the report's templates, made on first use."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("actviz.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        # None shows as nothing, as a missing value of the manifest should, not as "None".
        finalize=_none_as_empty,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(url=url, num=num, pct=pct, shape=shape_text)
    env.globals.update(version=__version__, severe=_SEVERE, stat_columns=STAT_COLUMNS)
    return env


def _none_as_empty(value: object) -> object:
    return "" if value is None else value


def url(path: str) -> str:
    """Percent-encode a relative path, keeping its slashes: spaces, '#', '?', '%', quotes
    and non-ASCII names then survive as URLs, and nothing in it can read as a scheme."""
    return quote(path, safe="/")


def num(value: Any) -> str:
    """A statistic with 4 significant digits; a dash for None (NaN in ``stats.json``)."""
    if value is None:
        return "\N{EN DASH}"
    if isinstance(value, int):
        return str(value)
    return f"{float(value):.4g}"


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal; a dash for None."""
    return "\N{EN DASH}" if value is None else f"{float(value):.1%}"


def shape_text(shape: Any) -> str:
    """A tensor shape as ``(1, 64, 56, 56)``; ``?`` when unknown."""
    return "(" + ", ".join(str(s) for s in shape) + ")" if shape else "?"


_warming: list[threading.Thread] = []


def warm_up() -> None:
    """Compile the report's page templates in a background thread while a run's images go
    through: the model's forward pass and the render threads spend their time in C with the
    GIL released, so the report at the end starts from ready templates."""
    if _warming:
        return

    def make() -> None:
        with contextlib.suppress(Exception):  # a failure shows up when the report is built
            environment().get_template("index.html")

    thread = threading.Thread(target=make, name="actviz-report-warm-up", daemon=True)
    _warming.append(thread)
    thread.start()
