"""Charts over training steps, as SVG text: lines per layer and a layers-by-steps heatmap.

Pure functions of plain numbers (what a training log holds), written directly as SVG like
:mod:`actviz.report.charts`: a few kilobytes a chart, sharp at any zoom, no plotting library.
Missing values (None, NaN in the log) break a line or leave a cell grey; hovering a line or a
cell shows its name and numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from actviz.report.charts import _xml, tick_labels

__all__ = ["heatmap", "line_chart", "series_colour"]

_FONT = "font-family:DejaVu Sans,Verdana,sans-serif"
_MISSING = "#d9dee3"
_BAD = "#b3261e"
# A perceptually even ramp (viridis' end points and middle), for lines by depth and cells.
_RAMP = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))


def _ramp(t: float) -> str:
    t = min(max(t, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(t), len(_RAMP) - 2)
    f = t - i
    a, b = _RAMP[i], _RAMP[i + 1]
    r, g, bl = (round(a[k] + (b[k] - a[k]) * f) for k in range(3))
    return f"#{r:02x}{g:02x}{bl:02x}"


def series_colour(index: int, count: int) -> str:
    """The colour of the ``index``-th of ``count`` lines: shallow layers dark, deep ones
    bright."""
    return _ramp(index / max(count - 1, 1) * 0.9)


def _usable(value: float | None, log: bool) -> bool:
    return value is not None and math.isfinite(value) and (value > 0 or not log)


def line_chart(
    steps: Sequence[int],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    log: bool = False,
    size: tuple[int, int] = (560, 260),
    reference: Sequence[tuple[float, str]] = (),
    band: tuple[float, float] | None = None,
    colours: Mapping[str, str] | None = None,
    marks: Sequence[tuple[int, str]] = (),
    limits: tuple[float, float] | None = None,
) -> str:
    """One line per series over the steps.

    Args:
        steps: The x values.
        series: ``{name: [value per step]}``; None for a missing value.
        title: Drawn at the top left.
        log: A log10 y axis (values <= 0 are left out).
        size: Width and height in CSS pixels.
        reference: Horizontal lines ``(value, label)``.
        band: A shaded y range ``(low, high)`` (the healthy range).
        colours: A colour per series (by depth order otherwise).
        marks: Vertical lines ``(step, label)``, e.g. where a NaN appeared.
        limits: The bounds of the quantity (``(0, 1)`` for a fraction): the y axis stays
            within them.
    """
    w, h = size
    left, right, top, bottom = 58.0, w - 12.0, 26.0, h - 28.0
    values = [v for line in series.values() for v in line if v is not None and _usable(v, log)] + [
        v for v, _ in reference if _usable(v, log)
    ]
    if band is not None:
        values += [v for v in band if _usable(v, log)]
    scale: Callable[[float], float] = math.log10 if log else (lambda v: v)
    if values:
        lo, hi = min(scale(v) for v in values), max(scale(v) for v in values)
    else:
        lo, hi = 0.0, 1.0
    if hi - lo < 1e-12 and limits is not None:
        lo, hi = scale(limits[0]), scale(limits[1])
    elif hi - lo < 1e-12:
        lo, hi = (
            lo - (0.5 if log else abs(lo) * 0.1 + 1.0),
            hi + (0.5 if log else abs(hi) * 0.1 + 1.0),
        )
    pad = (hi - lo) * 0.06
    lo, hi = lo - pad, hi + pad
    if limits is not None:
        # A quantity with bounds (a fraction): the axis never runs past them.
        lo, hi = max(lo, scale(limits[0])), min(hi, scale(limits[1]))
    first, last = (steps[0], steps[-1]) if steps else (0, 1)
    span = max(last - first, 1)

    def x_of(step: float) -> float:
        return left + (step - first) / span * (right - left)

    def y_of(value: float) -> float:
        return bottom - (scale(value) - lo) / (hi - lo) * (bottom - top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" style="{_FONT};font-size:10px" role="img" '
        f'aria-label="{_xml(title)}">',
        f'<rect width="{w}" height="{h}" fill="#fff"/>',
        f'<text x="{left}" y="15" fill="#1f2328" font-size="12">{_xml(title)}</text>',
    ]
    add = parts.append
    for tick, label in _ticks(lo, hi, log):
        y = bottom - (tick - lo) / (hi - lo) * (bottom - top)
        add(
            f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e8eb"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" fill="#59636e">{label}</text>'
        )
    for step in _step_ticks(first, last):
        add(
            f'<text x="{x_of(step):.1f}" y="{bottom + 14}" text-anchor="middle" '
            f'fill="#59636e">{step}</text>'
        )
    add(
        f'<text x="{(left + right) / 2:.0f}" y="{h - 2}" text-anchor="middle" '
        'fill="#59636e">step</text>'
    )
    if band is not None and all(_usable(v, log) for v in band):
        y1, y2 = y_of(band[1]), y_of(band[0])
        add(
            f'<rect x="{left}" y="{y1:.1f}" width="{right - left:.1f}" height="{y2 - y1:.1f}" '
            'fill="#2e7d32" fill-opacity="0.08"/>'
        )
    for value, label in reference:
        if _usable(value, log):
            y = y_of(value)
            add(
                f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#2e7d32" '
                f'stroke-dasharray="4 3"/><text x="{right - 2}" y="{y - 3:.1f}" '
                f'text-anchor="end" fill="#2e7d32">{_xml(label)}</text>'
            )
    for step, label in marks:
        x = x_of(step)
        add(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="{_BAD}" '
            f'stroke-width="1.5"><title>{_xml(label)}</title></line>'
        )
    names = list(series)
    for index, name in enumerate(names):
        colour = (colours or {}).get(name) or series_colour(index, len(names))
        runs: list[list[str]] = [[]]
        for step, point in zip(steps, series[name], strict=False):
            if point is None or not _usable(point, log):
                runs.append([])
            else:
                runs[-1].append(f"{x_of(step):.1f},{y_of(point):.1f}")
        known = [v for v in series[name] if v is not None and math.isfinite(v)]
        tip = _xml(f"{name}: last {known[-1]:.4g}" if known else f"{name}: no value")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                add(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}">')
                add(f"<title>{tip}</title></circle>")
            elif run:
                add(
                    f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                    f'stroke-width="1.3"><title>{tip}</title></polyline>'
                )
    if colours:  # named series: a key at the top right, right to left
        x = right
        for name in reversed([n for n in names if n in colours]):
            label = _xml(name)
            add(
                f'<text x="{x:.1f}" y="15" text-anchor="end" fill="#59636e">{label}</text>'
                f'<rect x="{x - 6.2 * len(name) - 14:.1f}" y="7" width="10" height="10" '
                f'fill="{colours[name]}"/>'
            )
            x -= 6.2 * len(name) + 26
    add("</svg>")
    return "".join(parts)


def heatmap(
    steps: Sequence[int],
    rows: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    width: int = 1000,
) -> str:
    """Rows (layers, top to bottom in depth order) by steps, coloured by log10 of the value:
    dark for small, bright for large; grey where missing, red where not finite."""
    names = list(rows)
    label_width = min(260.0, 12.0 + 6.2 * max((len(n) for n in names), default=4))
    row_h = 14.0 if len(names) <= 40 else max(4.0, 560.0 / len(names))
    top = 26.0
    h = int(max(top + row_h * len(names) + 40, top + 172))  # room for the colour scale
    left, right = label_width, width - 70.0
    cols = max(len(steps), 1)
    cell_w = (right - left) / cols
    logs = [
        math.log10(v)
        for line in rows.values()
        for v in line
        if v is not None and math.isfinite(v) and v > 0
    ]
    lo, hi = (min(logs), max(logs)) if logs else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{h}" '
        f'viewBox="0 0 {width} {h}" style="{_FONT};font-size:10px" role="img" '
        f'aria-label="{_xml(title)}">',
        f'<rect width="{width}" height="{h}" fill="#fff"/>',
        f'<text x="{left}" y="15" fill="#1f2328" font-size="12">{_xml(title)}</text>',
    ]
    add = parts.append
    for r, name in enumerate(names):
        y = top + r * row_h
        if row_h >= 8:
            add(
                f'<text x="{left - 4}" y="{y + row_h * 0.75:.1f}" text-anchor="end" '
                f'fill="#444" font-size="{min(10.0, row_h - 2):.0f}">{_xml(name)}</text>'
            )
        for c, value in enumerate(rows[name]):
            if value is None:
                fill = _MISSING
            elif not math.isfinite(value):
                fill = _BAD
            elif value <= 0:
                fill = _ramp(0.0)
            else:
                fill = _ramp((math.log10(value) - lo) / (hi - lo))
            step = steps[c] if c < len(steps) else c
            shown = "missing" if value is None else f"{value:.4g}"
            add(
                f'<rect x="{left + c * cell_w:.2f}" y="{y:.1f}" width="{cell_w + 0.3:.2f}" '
                f'height="{row_h:.1f}" fill="{fill}"><title>{_xml(name)} at step {step}: '
                f"{shown}</title></rect>"
            )
    bottom = top + row_h * len(names)
    for step in _step_ticks(steps[0], steps[-1]) if steps else []:
        c = min(range(len(steps)), key=lambda i: abs(steps[i] - step))
        add(
            f'<text x="{left + (c + 0.5) * cell_w:.1f}" y="{bottom + 14:.0f}" '
            f'text-anchor="middle" fill="#59636e">{steps[c]}</text>'
        )
    add(
        f'<text x="{(left + right) / 2:.0f}" y="{bottom + 28:.0f}" text-anchor="middle" '
        'fill="#59636e">step</text>'
    )
    # The colour scale.
    for i in range(20):
        add(
            f'<rect x="{right + 14}" y="{top + (19 - i) * 8:.0f}" width="12" height="8.5" '
            f'fill="{_ramp(i / 19)}"/>'
        )
    add(
        f'<text x="{right + 30}" y="{top + 8}" fill="#444">{10**hi:.2g}</text>'
        f'<text x="{right + 30}" y="{top + 160}" fill="#444">{10**lo:.2g}</text>'
    )
    add("</svg>")
    return "".join(parts)


def _ticks(lo: float, hi: float, log: bool) -> list[tuple[float, str]]:
    """The y ticks ``(position on the axis' scale, label)``: at least two where the range
    allows, labels told apart by their digits.

    A log axis ticks the powers of ten; one spanning less than a decade or two ticks 1, 2 and
    5 times them (or every digit times them), and one narrower still ticks like a linear axis
    of its values."""
    if not log:
        linear = _linear_ticks(lo, hi)
        return list(zip(linear, tick_labels(linear), strict=True))
    decades = [float(k) for k in range(math.ceil(lo), math.floor(hi) + 1)]
    while len(decades) > 7:
        decades = decades[::2]
    if len(decades) >= 2:
        return [(k, f"1e{k:g}") for k in decades]
    values: list[float] = []
    for mantissas in ((1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        values = [
            m * 10.0**k
            for k in range(math.floor(lo), math.ceil(hi) + 1)
            for m in mantissas
            if lo <= math.log10(m * 10.0**k) <= hi
        ]
        if len(values) >= 3:
            break
    if len(values) > 7:
        values = values[::2]
    if len(values) < 2:
        values = [v for v in _linear_ticks(10**lo, 10**hi) if v > 0]
    return [(math.log10(v), label) for v, label in zip(values, tick_labels(values), strict=True)]


def _linear_ticks(lo: float, hi: float) -> list[float]:
    """About five round values from ``lo`` to ``hi``."""
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def _step_ticks(first: int, last: int) -> list[int]:
    if last <= first:
        return [first]
    raw = (last - first) / 6
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = max(1, int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)))
    start = math.ceil(first / step) * step
    return list(range(start, last + 1, step))
