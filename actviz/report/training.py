"""The page of a training log, ``report.html``: from the log's records alone.

Built from plain records (what :func:`actviz.monitor.read_log` gives), so it can be redrawn at
any time, also while training goes on. The first non-finite origin is at the top, then the
flags, then the charts over steps: loss, gradient norm before and after clipping, a
layers-by-steps heatmap of the gradient reaching each layer, update-to-weight ratios, one
chart per layer statistic, and the probe batch's feature maps as a filmstrip per layer. The
charts are inline SVG (:mod:`actviz.report.timeline`), so the page is one file.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from actviz.report.blocks import MetaRow
from actviz.report.markup import render
from actviz.report.timeline import heatmap, line_chart

__all__ = ["LAYER_STATS", "training_page"]

#: The per-layer statistics charted over steps: key, title, log axis.
LAYER_STATS = (
    ("mean", "output mean", False),
    ("std", "output std", False),
    ("zero_frac", "fraction of zeros (dead units)", False),
    ("grad_norm", "norm of the gradient reaching the layer", True),
    ("max", "output max", False),
    ("min", "output min", False),
)


def _series(steps: Sequence[Mapping[str, Any]], group: str, key: str) -> dict[str, list[Any]]:
    names: dict[str, None] = {}
    for record in steps:
        for name in record.get(group) or {}:
            names.setdefault(name)
    return {
        name: [_number(((r.get(group) or {}).get(name) or {}).get(key)) for r in steps]
        for name in names
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def training_page(
    start: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    nonfinite: Sequence[Mapping[str, Any]],
    flags: Sequence[Mapping[str, Any]],
    *,
    end: Mapping[str, Any] | None = None,
    filmstrips: Sequence[Mapping[str, Any]] = (),
    runs: int = 1,
    torn: int = 0,
    source: str = "",
) -> bytes:
    """``report.html`` of one run of a training log, as UTF-8.

    Args:
        start: The run's ``start`` record.
        steps: Its ``step`` records, in step order.
        nonfinite: Its ``nonfinite`` records, earliest first.
        flags: Its flags (``kind``, ``target``, ``step``, ``message``), in step order.
        end: Its ``end`` record; None while it runs (or after a crash).
        filmstrips: ``{"layer": name, "frames": [{"step": n, "file": relative path}]}``.
        runs: How many runs the log holds (the page shows the latest).
        torn: Unreadable lines skipped.
        source: The log's path, shown on the page.
    """
    numbers = [int(r.get("step", 0)) for r in steps]
    marks = [
        (int(e.get("step", 0)), f"{e.get('value')} from {e.get('module')} ({e.get('phase')})")
        for e in nonfinite[:1]
    ]
    charts: list[tuple[str, Markup]] = []
    if steps:
        loss = {"loss": [_number(r.get("loss")) for r in steps]}
        if any(v is not None for v in loss["loss"]):
            charts.append(("Loss", _svg(line_chart(numbers, loss, title="loss", marks=marks))))
        norms = {
            "before clipping": [_number(r.get("grad_norm")) for r in steps],
            "after clipping": [_number(r.get("grad_norm_clipped")) for r in steps],
        }
        # One line, named as what it is, when nothing was clipped: without an optimizer there
        # is no step to clip for, and a loop that does not clip (or never reached its bound)
        # steps on the very norms it computed.
        clipped = any(
            a is not None and a != b
            for a, b in zip(norms["after clipping"], norms["before clipping"], strict=True)
        )
        if not clipped:
            norms = {"total": norms["before clipping"]}
        if any(v is not None for line in norms.values() for v in line):
            charts.append(
                (
                    "Total gradient norm" + (", before and after clipping" if clipped else ""),
                    _svg(
                        line_chart(
                            numbers,
                            norms,
                            title="total gradient norm (log)",
                            log=True,
                            colours={"before clipping": "#0a58ca", "after clipping": "#e07000"}
                            if clipped
                            else None,
                            marks=marks,
                        )
                    ),
                )
            )
    grads = _series(steps, "layers", "grad_norm")
    for name, line in grads.items():
        # A missing norm where the layer held NaN or Inf shows red, not grey.
        for i, record in enumerate(steps):
            row = (record.get("layers") or {}).get(name) or {}
            broken = (row.get("nan") or 0) + (row.get("inf") or 0) > 0 or record.get("nonfinite")
            if line[i] is None and row and broken:
                line[i] = math.nan
    grad_map = (
        _svg(heatmap(numbers, grads, title="gradient norm reaching each layer (log colour)"))
        if steps and any(v is not None for line in grads.values() for v in line)
        else None
    )
    ratios = {
        name: line
        for name, line in _series(steps, "params", "update_ratio").items()
        if any(v is not None and v > 0 for v in line)
    }
    ratio_chart = (
        _svg(
            line_chart(
                numbers,
                ratios,
                title="update / weight ratio per parameter (log)",
                log=True,
                size=(1000, 320),
                reference=[(1e-3, "1e-3")],
                band=(1e-4, 1e-2),
                marks=marks,
            )
        )
        if ratios
        else None
    )
    layer_charts = []
    for key, title, log in LAYER_STATS:
        series = _series(steps, "layers", key)
        if any(v is not None for line in series.values() for v in line):
            limits = (0.0, 1.0) if key == "zero_frac" else None
            chart = line_chart(numbers, series, title=title, log=log, marks=marks, limits=limits)
            layer_charts.append((title, _svg(chart)))
    last = steps[-1] if steps else {}
    layer_rows = [{"name": name, **row} for name, row in (last.get("layers") or {}).items()]
    param_rows = [{"name": name, **row} for name, row in (last.get("params") or {}).items()]
    return render(
        "training.html",
        start=start,
        first=nonfinite[0] if nonfinite else None,
        bad_loss=next(
            (r["loss_nonfinite"] for r in steps if isinstance(r.get("loss_nonfinite"), Mapping)),
            None,
        ),
        nonfinite=list(nonfinite),
        flags=list(flags),
        meta=_meta(start, steps, end, runs, torn, source),
        running=end is None,
        charts=charts,
        grad_map=grad_map,
        ratio_chart=ratio_chart,
        layer_charts=layer_charts,
        last_step=last.get("step"),
        layer_rows=layer_rows,
        param_rows=param_rows,
        filmstrips=list(filmstrips),
        legend=list(grads) or list(_series(steps, "layers", "mean")),
    )


def _svg(text: str) -> Markup:
    # Built by actviz.report.timeline, which escapes every name it writes.
    return Markup(text)  # noqa: S704


def _meta(
    start: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    end: Mapping[str, Any] | None,
    runs: int,
    torn: int,
    source: str,
) -> list[MetaRow]:
    began = _number(start.get("time"))
    rows = [
        MetaRow("log", source, code=True),
        MetaRow("model", start.get("model"), code=True),
        MetaRow("optimizer", start.get("optimizer") or "none given (no clip or update figures)"),
        MetaRow("started", _when(began)),
        MetaRow(
            "steps",
            f"{end.get('steps')} (finished)"
            if end is not None and end.get("error") is None
            else f"{end.get('steps')} (stopped by {end.get('error')})"
            if end is not None
            else "still running, or the process died (no end record)",
        ),
        MetaRow(
            "recorded",
            f"{len(steps)} step(s), every {start.get('every')}; {len(start.get('layers') or [])} "
            f"layers, {len(start.get('params') or [])} parameter tensors",
        ),
        MetaRow("non-finite watch", start.get("on_nonfinite")),
    ]
    if runs > 1:
        rows.append(MetaRow("earlier runs", f"{runs - 1} in the same log, not shown"))
    if torn:
        rows.append(MetaRow("unreadable lines", f"{torn} skipped (a torn last line after a crash)"))
    return rows


def _when(seconds: float | None) -> str | None:
    if seconds is None or not math.isfinite(seconds):
        return None
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
