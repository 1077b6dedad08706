"""The page of ``actviz cam-eval``, ``cam-eval.html``, from ``cam-eval.json`` alone: the verdict
table (each method's metrics with their intervals, against the baselines), the sanity check,
the curves, and the best and worst cases with every method's map."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows, weights_banner
from actviz.report.markup import render

__all__ = ["cam_eval_page", "interval"]


def cam_eval_page(record: Mapping[str, Any]) -> bytes:
    """``cam-eval.html`` for a cam-eval's record (what ``cam-eval.json`` holds), as UTF-8."""
    summary = record.get("summary") or {}
    metrics = record.get("metrics") or {}
    titles = record.get("titles") or {}  # the names cam-eval shows each map by
    rows = []
    for name, entry in summary.items():
        cells = []
        for metric in metrics:
            ci = (entry.get("metrics") or {}).get(metric) or {}
            cells.append(
                interval(ci, pct=metric == "increase", digits=1 if metric == "drop_pct" else 3)
            )
        sanity = entry.get("sanity") or {}
        stages = sanity.get("stages") or []
        last = stages[-1]["spearman"]["mean"] if stages else None
        rows.append(
            {
                "name": titles.get(name, name),
                "baseline": bool(entry.get("baseline")),
                "cells": cells,
                "beats": [
                    "\N{EM DASH}"
                    if base == name
                    else (entry.get("beats") or {}).get(base, {}).get("overall", "")
                    for base in record.get("baselines") or []
                ],
                "sanity": "\N{EN DASH}" if last is None else f"{last:.2f}",
                "flagged": bool(sanity.get("flagged")),
            }
        )
    images = record.get("images") or []
    ok = sum(1 for i in images if i.get("status") == "ok")
    protocol = record.get("protocol") or {}
    meta = [
        MetaRow("model", str(record.get("model", "?")), code=True),
        MetaRow("layer", str(record.get("layer", "")), code=True),
        MetaRow("target", str(record.get("target", ""))),
        MetaRow("images scored", f"{ok} of {len(images)}"),
        MetaRow(
            "protocol",
            f"{protocol.get('steps')} steps of {protocol.get('step_pixels')} pixels; deletion "
            f"to {protocol.get('deletion_substrate')}, insertion from a Gaussian blur of "
            f"{protocol.get('blur_kernel')} px (sigma {protocol.get('blur_sigma')}); "
            f"{protocol.get('score')}",
        ),
        *made_rows(record),
    ]
    sanity = record.get("sanity") or {}
    return render(
        "cam_eval.html",
        record=record,
        banner=weights_banner(record),
        meta=meta,
        headers=[str((metrics[m] or {}).get("label", m)) for m in metrics],
        better=[str((metrics[m] or {}).get("better", "")) for m in metrics],
        baselines=[titles.get(b, b) for b in record.get("baselines") or []],
        rows=rows,
        sanity_blocks=sanity.get("blocks") or [],
        sanity_threshold=sanity.get("threshold"),
        sanity_rows=[
            (
                titles.get(name, name),
                [
                    _fixed(s["spearman"]["mean"])
                    + (f" ({s['images']} of {ok})" if s.get("images", ok) < ok else "")
                    for s in (entry.get("sanity") or {}).get("stages") or []
                ],
                bool((entry.get("sanity") or {}).get("flagged")),
            )
            for name, entry in summary.items()
        ],
        cases=[
            dict(c, title=titles.get(str(c.get("method")), c.get("method")))
            for c in record.get("cases") or []
        ],
        failed=[i for i in images if i.get("status") != "ok"],
        warnings=[
            str(w)
            for w in record.get("warnings") or []
            if not is_weights_warning(str(w), record.get("weights") or {})
        ],
    )


def interval(
    ci: Mapping[str, Any],
    *,
    pct: bool = False,
    digits: int = 3,
    sep: str = ", ",
    missing: str = "\N{EN DASH}",
) -> str:
    """``0.412 [0.371, 0.455]``; percentages for a rate; ``missing`` without a mean (the
    terminal's table passes ``sep=","`` and ``missing="-"``)."""
    mean, low, high = ci.get("mean"), ci.get("low"), ci.get("high")
    if mean is None:
        return missing
    if pct:
        return f"{mean:.0%} [{low:.0%}{sep}{high:.0%}]"
    return f"{mean:.{digits}f} [{low:.{digits}f}{sep}{high:.{digits}f}]"


def _fixed(value: Any) -> str:
    return "\N{EN DASH}" if value is None else f"{float(value):.2f}"
