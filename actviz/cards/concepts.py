"""The cards of the concept commands' results: ``actviz.label`` (units named from concepts)
and ``actviz.tcav`` (how much a concept moves a class), from the results' attributes only."""

from __future__ import annotations

from typing import Any

from actviz.cards.card import MAX_ROWS, Card, Table
from actviz.cards.results import _links, _plural, _thumbs, _weights_warnings, fmt, weights_text

__all__ = ["LABEL_RANDOM", "TCAV_RANDOM", "label_card", "tcav_card"]

LABEL_RANDOM = "random weights: these labels describe an untrained model, not learned features"
TCAV_RANDOM = "random weights: these scores describe an untrained model, not learned concepts"
_TITLES = {"auprc": "AUPRC", "f1": "F1", "pearson": "Pearson r", "auc": "AUC", "iou": "IoU"}


def label_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``LabelResult``: the labelled units of the first layer, best first."""
    first = result.layers[0] if result.layers else None
    labelled = (
        sorted(
            (r for r in first.records if r.get("label") is not None),
            key=lambda r: -(r.get("score") or 0.0),
        )
        if first is not None
        else []
    )
    title = _TITLES.get(result.metric, result.metric)
    rows = [
        [
            f"{first.unit if first else 'unit'} {r['unit']}",
            r["label"],
            fmt(r.get("score")),
            fmt(r.get("q")),
            fmt(r.get("positives")),
            ", ".join(e["concept"] for e in (r.get("labels") or [])[1:]) or "-",
        ]
        for r in labelled[:MAX_ROWS]
    ]
    layers = ", ".join(f"{layer.key}: {layer.labelled} of {layer.units}" for layer in result.layers)
    named = ((layer.chart, layer.key) for layer in result.layers)
    thumbs = _thumbs(result.out, named) if pictures else []
    tested = sum(1 for c in result.concepts if c.get("tested"))
    summary = (
        f"LabelResult(model={result.model!r}, layers={len(result.layers)}, "
        f"labelled={sum(layer.labelled for layer in result.layers)}, out={str(result.out)!r})"
    )
    return Card(
        kind="label",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            (
                "concepts",
                f"{tested} tested of {_plural(len(result.concepts), 'concept')} from "
                f"{result.source}",
            ),
            (
                "images",
                f"{result.images:,}"
                + (f" ({len(result.failed):,} failed)" if result.failed else ""),
            ),
            ("labelled", layers or "-"),
            ("test", f"{title}, Benjamini-Hochberg at {result.alpha}"),
            ("time", f"{result.seconds:.1f} s"),
        ],
        warnings=_warnings(result, LABEL_RANDOM),
        table=Table(
            ["unit", "label", title, "q", "images", "more labels"],
            rows,
            len(labelled),
            "labelled units" + (f" of {first.key}" if first else ""),
        ),
        thumbs=thumbs,
        more_thumbs=max(0, len(result.layers) - len(thumbs)),
        links=_links(result.out, [("report", result.report), ("labels.json", result.record)]),
    )


def tcav_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``TcavResult``: every concept and target, its score over the runs, the
    random directions' and the test."""
    rows = [
        [
            s["concept"],
            s["target_name"] or str(s["target"]),
            f"{fmt(s['score'])} ± {fmt(s['spread'])}",
            f"{fmt(s['random'])} ± {fmt(s['random_spread'])}",
            fmt(s["p"]),
            "yes" if s["significant"] else "no",
        ]
        for s in result.scores[:MAX_ROWS]
    ]
    thumbs = _thumbs(result.out, [(result.chart, "TCAV scores")]) if pictures else []
    summary = (
        f"TcavResult(model={result.model!r}, layer={result.layer!r}, "
        f"concepts={len(result.concepts)}, out={str(result.out)!r})"
    )
    return Card(
        kind="tcav",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            ("layer", result.layer),
            ("vectors", f"{result.cav} over {result.runs} runs, seed {result.seed}"),
            ("inputs", f"{result.images:,} images"),
            ("time", f"{result.seconds:.1f} s"),
        ],
        warnings=_warnings(result, TCAV_RANDOM),
        table=Table(
            ["concept", "target", "TCAV score", "random", "p", "significant"],
            rows,
            len(result.scores),
            "concepts and targets",
        ),
        thumbs=thumbs,
        links=_links(result.out, [("report", result.report), ("tcav.json", result.record)]),
    )


def _warnings(result: Any, random_note: str) -> list[str]:
    """The random-weights warning first, in the command's words (``random_note``), then the
    result's others (its loud load-time warning said once)."""
    others = [w for w in result.warnings if not w.startswith("RANDOM WEIGHTS")]
    return _weights_warnings(result.weights, random_note if result.random_weights else None, others)
