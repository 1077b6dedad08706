"""The card of an ablation (``actviz.ablate``'s result): what was removed and how, the classes
that lost most, the flow of the lost images, and the pictures."""

from __future__ import annotations

from typing import Any

from actviz.cards.card import MAX_ROWS, MAX_THUMBS, Card, Table
from actviz.cards.results import _links, _thumb, _weights_warnings, weights_text

__all__ = ["ablate_card"]


def _share(value: object) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "-"


def _points(before: object, after: object) -> str:
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return "-"
    return f"{100 * (after - before):+.0f}"


def ablate_card(result: Any, pictures: bool = True) -> Card:
    """The card of an ``AblateResult``: per class of the ablation that lost most images, its
    accuracy before and after, the change in points and of its logit, worst first."""
    headline = next(iter(result.ranked()), None)  # the ablation the pictures show
    name = headline["name"] if headline else None
    rows = sorted(
        result.rows(name),
        key=lambda r: ((r["acc_after"] or 0) - (r["acc_before"] or 0), r["class"]),
    )
    word = "agree" if result.labels == "agreement" else "acc"
    table = Table(
        ["class", "n", f"{word} before", f"{word} after", "points", "dlogit"],
        [
            [
                r["class"],
                r["n"],
                _share(r["acc_before"]),
                _share(r["acc_after"]),
                _points(r["acc_before"], r["acc_after"]),
                f"{r['dlogit']:+.3g}",
            ]
            for r in rows[:MAX_ROWS]
        ],
        len(rows),
        "classes",
    )
    flags = []
    if headline is not None:
        for flow in headline["flow"][:3]:
            went = ", ".join(f"{t['class']} ({t['n']})" for t in flow["to"][:3])
            flags.append(f"{flow['class']} lost {flow['lost']} image(s) to {went}")
    flags += [
        f"--fail-on {result.fail_on['rule']}: {c['class']} under {c['ablation']} "
        f"({c['value']:+.3g})"
        for c in result.crossed[:3]
    ]
    thumbs = []
    if pictures:
        named = [
            (result.pictures.get("classes"), "per class"),
            (result.pictures.get("curves"), "curves"),
        ]
        named += [(c["file"], f"{c['image']}: before / after") for c in result.cases]
        for rel, label in named[:MAX_THUMBS]:
            thumb = _thumb(result.out, rel, label)
            if thumb is not None:
                thumbs.append(thumb)
    overall = headline["overall"] if headline else {}
    summary = (
        f"AblateResult(model={result.model!r}, layer={result.layer!r}, "
        f"ablations={len(result.ablations)}, mode={result.mode!r}, images={result.images}, "
        f"out={str(result.out)!r})"
    )
    return Card(
        kind="ablate",
        title=f"{result.model} at {result.layer}",
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            ("removed", f"{name} ({len(result.ablations)} ablation(s)), mode {result.mode}"),
            ("labels", result.labels),
            ("images", f"{result.images:,} ({len(result.failed)} failed)"),
            (
                "overall",
                f"{word} {_share(overall.get('acc_before'))} -> {_share(overall.get('acc_after'))}"
                f", {overall.get('lost', 0)} image(s) lost",
            ),
            ("time", f"{result.seconds:.1f} s on {result.device}"),
        ],
        warnings=list(
            dict.fromkeys(_weights_warnings(result.weights, result.warning, result.warnings))
        ),
        flags=flags,
        table=table,
        thumbs=thumbs,
        more_thumbs=max(0, 2 + len(result.cases) - MAX_THUMBS),
        links=_links(
            result.out,
            [("report", result.report), ("ablate.json", result.record), ("table", result.table)],
        ),
    )
