"""The page of ``actviz tcav``, ``tcav.html``, from ``tcav.json`` alone: the scores of every
concept and class against the random vectors', the test, the chart and the vectors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows
from actviz.report.markup import num, render

__all__ = ["tcav_page"]


def tcav_page(doc: Mapping[str, Any]) -> bytes:
    """``tcav.html`` for a tcav run's record (what ``tcav.json`` holds), as UTF-8."""
    weights = doc.get("weights") or {}
    protocol = doc.get("protocol") or {}
    rows = []
    for r in doc.get("scores") or []:
        target = r.get("target_name") or f"class {r.get('target')}"
        higher = (r.get("score") or 0.0) > (r.get("random") or 0.0)
        rows.append(
            {
                "concept": r["concept"],
                "target": f"{target} ({r.get('target')})",
                "score": f"{num(r.get('score'))} \N{PLUS-MINUS SIGN} {num(r.get('spread'))}",
                "random": (
                    f"{num(r.get('random'))} \N{PLUS-MINUS SIGN} {num(r.get('random_spread'))}"
                ),
                "magnitude": num(r.get("magnitude")),
                "p": _p(r.get("p")),
                "q": _p(r.get("q")),
                "significant": bool(r.get("significant")),
                "direction": "raises the class's score" if higher else "lowers the class's score",
            }
        )
    meta = [
        MetaRow("model", str(doc.get("model", "?")), code=True),
        MetaRow("layer", f"{doc.get('layer')} ({doc.get('maps', ['?'])[0]} channels)", code=True),
        MetaRow(
            "protocol",
            f"{protocol.get('runs')} runs, seed {protocol.get('seed')}; random images: "
            f"{protocol.get('random_images')} from {', '.join(protocol.get('random') or [])}",
        ),
        MetaRow(
            "test",
            f"two-sided permutation test ({protocol.get('test_permutations')} permutations) of "
            f"the mean score against the random vectors'; Benjamini-Hochberg at "
            f"{protocol.get('alpha')} over concepts and classes",
        ),
        *made_rows(doc),
    ]
    images = doc.get("images") or {}
    reason = weights.get("reason") or (
        "--weights none was given"
        if weights.get("spec") == "none"
        else "no pretrained weights were found"
    )
    return render(
        "tcav.html",
        doc=doc,
        random=bool(weights.get("random")),
        seed=weights.get("seed"),
        reason=reason,
        warnings=[
            str(w)
            for w in doc.get("warnings") or []
            if not (weights.get("random") and is_weights_warning(str(w), weights))
        ],
        meta=meta,
        rows=rows,
        failed=[
            {"path": f.get("path"), "error": f.get("error")} for f in images.get("failed") or []
        ],
        failed_total=images.get("failed_count", 0),
    )


def _p(value: Any) -> str:
    if value is None:
        return "\N{EN DASH}"
    v = float(value)
    return f"{v:.3g}" if v < 0.01 else f"{v:.3f}"
