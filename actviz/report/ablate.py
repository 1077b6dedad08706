"""The page of ``actviz ablate``, ``ablate.html``, from ``ablate.json`` alone: what was removed
and how, per ablation the classes that lost most with the flow of their images, for a sweep
each class's curves and its most important units, and the most affected images with their
maps before and after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows, weights_banner
from actviz.report.markup import render

__all__ = ["ablate_page"]

#: Per ablation on the page: classes shown at most (the table in ablate.json has them all).
CLASSES_SHOWN = 50
#: Ablations shown (a sweep's, those that lost most images first).
ABLATIONS_SHOWN = 20


def _share(value: Any) -> str:
    return "\N{EN DASH}" if value is None else f"{float(value):.1%}"


def _points(before: Any, after: Any) -> str:
    if before is None or after is None:
        return "\N{EN DASH}"
    return f"{100 * (float(after) - float(before)):+.1f}"


def ablate_page(record: Mapping[str, Any]) -> bytes:
    """``ablate.html`` for an ablate's record (what ``ablate.json`` holds), as UTF-8."""
    ablations = sorted(
        record.get("ablations") or [],
        key=lambda a: (-int((a.get("overall") or {}).get("lost", 0)), str(a.get("name"))),
    )
    rows_by: dict[str, list[Mapping[str, Any]]] = {}
    for row in record.get("classes") or []:
        rows_by.setdefault(str(row.get("ablation")), []).append(row)
    sections = []
    for ablation in ablations[:ABLATIONS_SHOWN]:
        rows = sorted(
            rows_by.get(str(ablation.get("name")), []),
            key=lambda r: ((r.get("acc_after") or 0) - (r.get("acc_before") or 0), str(r["class"])),
        )
        overall = ablation.get("overall") or {}
        sections.append(
            {
                "name": ablation.get("name"),
                "overall": [
                    (
                        "accuracy",
                        f"{_share(overall.get('acc_before'))} \N{RIGHTWARDS ARROW} "
                        f"{_share(overall.get('acc_after'))}",
                    ),
                    (
                        "balanced accuracy",
                        f"{_share(overall.get('balanced_acc_before'))} "
                        f"\N{RIGHTWARDS ARROW} {_share(overall.get('balanced_acc_after'))}",
                    ),
                    ("images that changed prediction", str(overall.get("changed", 0))),
                    ("lost (right before, wrong after)", str(overall.get("lost", 0))),
                ],
                "rows": [
                    {
                        **row,
                        "before": _share(row.get("acc_before")),
                        "after": _share(row.get("acc_after")),
                        "points": _points(row.get("acc_before"), row.get("acc_after")),
                        "bal_before": _share(row.get("balanced_acc_before")),
                        "bal_after": _share(row.get("balanced_acc_after")),
                        "dlogit": f"{float(row.get('dlogit', 0.0)):+.4f}",
                        "lost": (row.get("acc_after") or 0) < (row.get("acc_before") or 0),
                    }
                    for row in rows[:CLASSES_SHOWN]
                ],
                "more": max(0, len(rows) - CLASSES_SHOWN),
                "flow": [
                    (f["class"], f["lost"], ", ".join(f"{t['class']} ({t['n']})" for t in f["to"]))
                    for f in ablation.get("flow") or []
                ][:CLASSES_SHOWN],
            }
        )
    mode = record.get("mode") or {}
    labels = record.get("labels") or {}
    protocol = record.get("protocol") or {}
    layer = record.get("layer") or {}
    images = record.get("images") or {}
    meta = [
        MetaRow("model", str(record.get("model", "?")), code=True),
        MetaRow(
            "layer",
            f"{layer.get('module', '')} {tuple(layer.get('output_shape') or ())}",
            code=True,
        ),
        MetaRow("removed", _removed(record.get("remove") or {})),
        MetaRow("mode", f"{mode.get('spec', '')}: {mode.get('says', '')}"),
        MetaRow("labels", str(labels.get("says", ""))),
        MetaRow(
            "images", f"{images.get('ok', 0)} scored, {len(images.get('failed') or [])} failed"
        ),
        MetaRow(
            "how",
            str(protocol.get("shortcut") or protocol.get("split", ""))
            + (f" ({protocol['fallback']})" if protocol.get("fallback") else ""),
        ),
        *made_rows(record),
    ]
    if protocol.get("each"):
        meta.append(
            MetaRow(
                "ranking",
                f"units ranked per class by {protocol.get('ranked_by')}, on "
                f"{protocol.get('rank_images')} images ({protocol.get('rank_share'):.0%} of "
                f"each class, seed {protocol.get('seed')}); the curves measured on the rest",
            )
        )
    fail = record.get("fail_on")
    return render(
        "ablate.html",
        record=record,
        banner=weights_banner(record),
        meta=meta,
        sections=sections,
        hidden=max(0, len(ablations) - ABLATIONS_SHOWN),
        agreement=labels.get("source") == "agreement",
        curves=[
            {**c, "top": ", ".join(str(u) for u in (c.get("order") or [])[:10])}
            for c in record.get("curves") or []
        ][:CLASSES_SHOWN],
        pictures=record.get("pictures") or {},
        cases=record.get("cases") or [],
        fail=fail,
        failed=[
            {"path": f.get("image"), "error": f.get("error")} for f in images.get("failed") or []
        ],
        warnings=[
            str(w)
            for w in record.get("warnings") or []
            if not is_weights_warning(str(w), record.get("weights") or {})
        ],
    )


def _removed(remove: Mapping[str, Any]) -> str:
    kind = remove.get("kind")
    if kind == "units":
        units = remove.get("units") or []
        return f"{len(units)} unit(s): {', '.join(str(u) for u in units[:20])}" + (
            ", ..." if len(units) > 20 else ""
        )
    if kind == "features":
        return (
            f"features {', '.join(str(f) for f in remove.get('features') or [])} of the "
            f"dictionary {remove.get('dictionary')}"
        )
    return f"the direction in {remove.get('file')}"
