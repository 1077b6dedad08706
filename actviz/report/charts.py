"""The depth chart of the report: how a network's activations change from layer to layer.

:func:`depth_chart` draws one picture of an image (or of a run's aggregate) from the layer rows
of ``stats.json``, as SVG written directly: a few kilobytes of text a browser draws sharp at any
zoom, about a millisecond each where a matplotlib figure cost 40-100 ms and its import 0.3 s a
process. Which images get one is for :mod:`actviz.report.pages` to decide.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["CHART_SIZE", "depth_chart", "symlog", "tick_labels"]

#: Width and height of a chart in CSS pixels.
CHART_SIZE = (1000, 420)

_LEFT, _RIGHT = 70.0, 990.0
_TOP = (44.0, 234.0)  # the upper panel: mean, std and the percentile band
_BOTTOM = (274.0, 388.0)  # the lower panel: fractions of values and channels
_FONT = "font-family:DejaVu Sans,Verdana,sans-serif"
_RED = "#b3261e"
_UPPER = (("std", "std", "#0a58ca", 1.5), ("mean", "mean", "#333333", 1.0))
_LOWER = (
    ("zero_frac", "zeros", "#2e7d32", 1.2),
    ("neg_frac", "negative", "#8a5300", 1.0),
    ("dead_frac", "dead ch.", _RED, 1.2),
)


def symlog(linthresh: float) -> Callable[[float], float]:
    """Linear within ``linthresh`` of 0, a decade per unit beyond: means that hover near 0 stay
    flat instead of swinging across decades, and an explosion still fits."""

    def scale(value: float) -> float:
        if abs(value) <= linthresh:
            return value / linthresh
        return math.copysign(1.0 + math.log10(abs(value) / linthresh), value)

    return scale


def depth_chart(
    layers: Sequence[Mapping[str, Any]], flags: Sequence[Mapping[str, Any]], title: str
) -> bytes:
    """The depth profile of one image (or of the run) as SVG: mean, std and the 1-99 % band on
    a symlog axis above; zero, negative and dead-channel fractions below; flagged layers marked
    in red with their kinds. Hovering a layer's column (in the SVG opened on its own) shows its
    name and numbers."""
    n = len(layers)
    if n == 0:
        raise ValueError("a depth chart needs at least one layer")
    pad = 0.5 + 0.02 * n
    span = (n - 1) + 2 * pad

    def x_of(i: float) -> float:
        return _LEFT + (i + pad) / span * (_RIGHT - _LEFT)

    def column(key: str) -> list[float | None]:
        out: list[float | None] = []
        for row in layers:
            value = row.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                out.append(float(value))
            else:
                out.append(None)
        return out

    parts: list[str] = []
    add = parts.append
    w, h = CHART_SIZE
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" style="{_FONT};font-size:11px">'
    )
    add(f'<rect width="{w}" height="{h}" fill="#fff"/>')

    # The upper panel's scale: symlog when the spread is known, linear otherwise.
    upper = {key: column(key) for key in ("mean", "std", "p01", "p99")}
    spreads = sorted(v for v in upper["std"] if v is not None and v > 0)
    linthresh = spreads[len(spreads) // 2] / 10 if spreads else 0.0
    scale = symlog(linthresh) if linthresh > 0 else (lambda v: v)
    values = [scale(v) for col in upper.values() for v in col if v is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo < 1e-12:
        lo, hi = lo - 1.0, hi + 1.0
    margin = (hi - lo) * 0.05
    lo, hi = lo - margin, hi + margin
    top, bottom = _TOP

    def y_upper(v: float) -> float:
        return bottom - (scale(v) - lo) / (hi - lo) * (bottom - top)

    ticks = _symlog_ticks(linthresh, lo, hi) if linthresh > 0 else _linear_ticks(lo, hi)
    _axis(add, ticks, y_upper, tick_labels(ticks))
    add(
        f'<line x1="{_LEFT}" x2="{_RIGHT}" y1="{y_upper(0.0):.1f}" y2="{y_upper(0.0):.1f}" '
        'stroke="#9aa3ab" stroke-width="0.8"/>'
    )
    add(_band(upper["p01"], upper["p99"], x_of, y_upper))
    for key, _, colour, width in _UPPER:
        add(_polyline(upper[key], x_of, y_upper, colour, width))
    _legend(add, top - 8, [(label, colour) for _, label, colour, _ in _UPPER], band=True)

    # The lower panel: fractions, 0 to 100 %.
    top2, bottom2 = _BOTTOM

    def y_lower(v: float) -> float:
        return bottom2 - (v + 0.03) / 1.06 * (bottom2 - top2)

    fractions = [0.0, 0.5, 1.0]
    _axis(add, fractions, y_lower, [f"{v:.0%}" for v in fractions])
    for key, _, colour, width in _LOWER:
        add(_polyline(column(key), x_of, y_lower, colour, width))
    _legend(add, top2 - 8, [(label, colour) for _, label, colour, _ in _LOWER], band=False)

    # Layer numbers: every one while they fit (up to 40), evenly spaced ones beyond.
    step = 1 if n <= 40 else math.ceil(n / 40)
    for i in range(0, n, step):
        add(
            f'<text x="{x_of(i):.1f}" y="{bottom2 + 14:.0f}" text-anchor="middle" '
            f'fill="#59636e" font-size="10">{i}</text>'
        )
    add(
        f'<text x="{(_LEFT + _RIGHT) / 2:.0f}" y="{h - 4}" text-anchor="middle" '
        'fill="#59636e">layer (capture order, # in the tables)</text>'
    )
    add(
        f'<text x="{_RIGHT:.0f}" y="14" text-anchor="end" fill="#59636e" '
        f'font-size="12">{_xml(title)}</text>'
    )
    _flag_marks(add, layers, flags, x_of)
    _hover_columns(add, layers, x_of, span)
    add("</svg>")
    return "\n".join(parts).encode("utf-8")


def _axis(
    add: Callable[[str], None],
    ticks: Sequence[float],
    y_of: Callable[[float], float],
    labels: Sequence[str],
) -> None:
    for value, label in zip(ticks, labels, strict=True):
        y = y_of(value)
        add(
            f'<line x1="{_LEFT}" x2="{_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e8eb" '
            f'stroke-width="0.6"/><text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'fill="#444">{escape(label)}</text>'
        )


def _segments(
    values: Sequence[float | None],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
) -> list[list[tuple[float, float]]]:
    """Runs of known values as points; a missing value breaks the line."""
    runs: list[list[tuple[float, float]]] = [[]]
    for i, value in enumerate(values):
        if value is None:
            runs.append([])
        else:
            runs[-1].append((x_of(i), y_of(value)))
    return [run for run in runs if run]


def _polyline(
    values: Sequence[float | None],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    colour: str,
    width: float,
) -> str:
    out = []
    for run in _segments(values, x_of, y_of):
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="{width}"/>'
        )
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="{colour}"/>' for x, y in run)
    return "".join(out)


def _band(
    low: Sequence[float | None],
    high: Sequence[float | None],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
) -> str:
    """The 1st-99th percentile band, one polygon per run of layers that have both."""
    both = [None if a is None or b is None else (a, b) for a, b in zip(low, high, strict=True)]
    out = []
    start = 0
    for end in range(len(both) + 1):
        if end == len(both) or both[end] is None:
            run = [(i, both[i]) for i in range(start, end)]
            if run:
                upper = [f"{x_of(i):.1f},{y_of(p[1]):.1f}" for i, p in run if p]
                lower = [f"{x_of(i):.1f},{y_of(p[0]):.1f}" for i, p in reversed(run) if p]
                out.append(
                    f'<polygon points="{" ".join(upper + lower)}" fill="#0a58ca" '
                    'fill-opacity="0.12"/>'
                )
            start = end + 1
    return "".join(out)


def _legend(
    add: Callable[[str], None], y: float, entries: Sequence[tuple[str, str]], *, band: bool
) -> None:
    x = _LEFT
    for label, colour in entries:
        add(
            f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
            f'stroke-width="2"/><text x="{x + 23}" y="{y}" fill="#333">{escape(label)}</text>'
        )
        x += 30 + 7 * len(label)
    if band:
        add(
            f'<rect x="{x}" y="{y - 8}" width="18" height="7" fill="#0a58ca" fill-opacity="0.3"/>'
            f'<text x="{x + 23}" y="{y}" fill="#333">1st-99th percentile</text>'
        )


def _flag_marks(
    add: Callable[[str], None],
    layers: Sequence[Mapping[str, Any]],
    flags: Sequence[Mapping[str, Any]],
    x_of: Callable[[float], float],
) -> None:
    positions = {str(r.get("name")): i for i, r in enumerate(layers)}
    marked: dict[int, list[str]] = {}
    for flag in flags:
        where = positions.get(str(flag.get("layer")))
        if where is not None:
            marked.setdefault(where, []).append(str(flag.get("kind")))
    for where, kinds in sorted(marked.items()):
        x = x_of(where)
        label = _xml(",".join(dict.fromkeys(kinds)))
        for top, bottom in (_TOP, _BOTTOM):
            add(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="{_RED}" '
                'stroke-opacity="0.3" stroke-width="2"/>'
            )
        add(
            f'<text transform="translate({x + 3:.1f},{_TOP[0] + 2}) rotate(90)" '
            f'fill="{_RED}" font-size="9">{label}</text>'
        )


def _hover_columns(
    add: Callable[[str], None],
    layers: Sequence[Mapping[str, Any]],
    x_of: Callable[[float], float],
    span: float,
) -> None:
    """A transparent column per layer whose tooltip gives its name and numbers."""
    width = (_RIGHT - _LEFT) / span
    for i, row in enumerate(layers):
        numbers = ", ".join(
            f"{key} {row[key]:.4g}"
            for key in ("mean", "std", "p01", "p99", "zero_frac", "dead_frac")
            if isinstance(row.get(key), int | float)
        )
        tip = _xml(f"#{i} {row.get('name', '')}: {numbers}")
        add(
            f'<rect x="{x_of(i) - width / 2:.1f}" y="{_TOP[0]}" width="{width:.1f}" '
            f'height="{_BOTTOM[1] - _TOP[0]}" fill="#000" fill-opacity="0">'
            f"<title>{tip}</title></rect>"
        )


# Characters XML forbids (C0 controls but tab and newlines, lone surrogates from undecodable
# file names, U+FFFE/U+FFFF): one in a path would make the whole chart unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    """``text`` escaped for SVG, characters XML cannot hold replaced by U+FFFD."""
    return escape(_NOT_XML.sub("\ufffd", text))


def _symlog_ticks(linthresh: float, lo: float, hi: float) -> list[float]:
    """0 and the powers of ten (either sign) in the visible range, none within ``linthresh``
    of 0 where their labels would sit on top of each other; every other one when crowded."""
    top = 10 ** (hi - 1) * linthresh if hi > 1 else linthresh
    bottom = 10 ** (-lo - 1) * linthresh if lo < -1 else linthresh
    ticks = [0.0]
    for sign, reach in ((1.0, top), (-1.0, bottom)):
        k = math.floor(math.log10(linthresh)) + 1
        while 10.0**k <= reach * (1 + 1e-9):
            if 10.0**k > linthresh * 1.001:
                ticks.append(sign * 10.0**k)
            k += 1
    ticks.sort()
    while len(ticks) > 9:
        zero = ticks.index(0.0)
        ticks = [t for i, t in enumerate(ticks) if (i - zero) % 2 == 0]
    return ticks


def _linear_ticks(lo: float, hi: float) -> list[float]:
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step)
    return [i * step for i in range(first, math.floor(hi / step) + 1)]


def tick_labels(values: list[float]) -> list[str]:
    """Labels for axis ticks, with as few significant digits as keep them apart: ``1.2001``
    and ``1.2002`` must not both read ``1.2``. Rounding noise (``0.30000000000000004``) and
    ``-0`` never show."""
    big = max((abs(v) for v in values), default=0.0)
    cleaned = [0.0 if abs(v) <= 1e-12 * big else v for v in values]
    for digits in range(3, 16):
        labels = [f"{v:.{digits}g}" for v in cleaned]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(v) for v in cleaned]
