"""The pages of ``actviz label`` from ``labels.json`` alone: ``label.html`` (the layers and the
concepts, with their learnability) and one page per layer (its chart, every unit's labels
linked to its contact sheet, the labelled units' sheets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actviz.report.blocks import MetaRow, is_weights_warning, made_rows
from actviz.report.markup import num, render

__all__ = ["label_index_page", "label_layer_page"]

_TITLES = {"auprc": "AUPRC", "f1": "F1", "pearson": "Pearson r", "auc": "AUC", "iou": "IoU"}
_SOURCES = {
    "tags": "the tags of a CSV file",
    "classes": "the folder's subfolders (classes)",
    "masks": "pixel masks",
    "clip": "the words a local CLIP model gives the images",
}
#: Labelled units whose contact sheet a layer's page shows.
SHEETS = 32


def _weights(doc: Mapping[str, Any]) -> dict[str, Any]:
    weights = doc.get("weights") or {}
    reason = weights.get("reason") or (
        "--weights none was given"
        if weights.get("spec") == "none"
        else "no pretrained weights were found"
    )
    return {"random": bool(weights.get("random")), "seed": weights.get("seed"), "reason": reason}


def _warnings(doc: Mapping[str, Any]) -> list[str]:
    weights = doc.get("weights") or {}
    return [
        str(w)
        for w in doc.get("warnings") or []
        if not (weights.get("random") and is_weights_warning(str(w), weights))
    ]


def _meta(doc: Mapping[str, Any]) -> list[MetaRow]:
    protocol = doc.get("protocol") or {}
    images = doc.get("images") or {}
    source = doc.get("source") or {}
    tested = str(protocol.get("tested", doc.get("metric", "")))
    rows = [
        MetaRow("model", str(doc.get("model", "?")), code=True),
        MetaRow(
            "concepts",
            f"{len(doc.get('concepts') or [])} from {_SOURCES.get(str(source.get('kind')), '?')}"
            + (f" ({source.get('file')})" if source.get("file") else ""),
        ),
        MetaRow(
            "images",
            f"{images.get('scored')} scored of {images.get('count')}"
            + (f", {images.get('failed_count')} failed" if images.get("failed_count") else ""),
        ),
        MetaRow(
            "test",
            f"{_TITLES.get(tested, tested)} of each unit's {protocol.get('score')} score, "
            f"{protocol.get('permutations')} permutations (seed {protocol.get('seed')}); "
            f"Benjamini-Hochberg over each layer at {protocol.get('alpha')}",
        ),
    ]
    masks = protocol.get("masks")
    if masks:
        rows.append(
            MetaRow(
                "masks",
                f"IoU on a {masks['grid'][0]}x{masks['grid'][1]} grid at each unit's top "
                f"{float(masks['quantile']) * 100:.3g}% of map values; a label needs IoU "
                f"of at least {masks['min_iou']}",
            )
        )
    rows += [
        *made_rows(doc),
    ]
    return rows


def _labels_summary(layer: Mapping[str, Any], limit: int = 6) -> str:
    counts: dict[str, int] = {}
    for record in layer.get("records") or []:
        if record.get("label") is not None:
            counts[str(record["label"])] = counts.get(str(record["label"]), 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{name} ({n})" for name, n in ranked[:limit])
    return text + (f", +{len(ranked) - limit} more" if len(ranked) > limit else "") or "none"


def label_index_page(doc: Mapping[str, Any]) -> bytes:
    """``label.html`` for a label run's record (what ``labels.json`` holds), as UTF-8."""
    layers = doc.get("layers") or []
    names = [str(layer["layer"]) for layer in layers]
    concepts = []
    learnable = False
    for row in doc.get("concepts") or []:
        probe = row.get("learnability") or {}
        learnable = learnable or bool(probe)
        concepts.append(
            {
                "concept": row["concept"],
                "positives": row["positives"],
                "tested": row["tested"],
                "reason": row.get("reason"),
                "units": [(row.get("units") or {}).get(name, 0) for name in names],
                "base": num(probe.get("base")),
                "probes": [num((probe.get("layers") or {}).get(name)) for name in names],
                "pixels": num(probe.get("pixels")),
            }
        )
    images = doc.get("images") or {}
    source = (doc.get("source") or {}).get("kind")
    return render(
        "label.html",
        doc=doc,
        **_weights(doc),
        source_words=_SOURCES.get(str(source), "the user's concepts"),
        warnings=_warnings(doc),
        meta=_meta(doc),
        layers=[
            {
                "name": layer["layer"],
                "units": layer["units"],
                "labelled": layer["labelled"],
                "unlabelled": layer["unlabelled"],
                "summary": _labels_summary(layer),
                "page": layer.get("page"),
                "chart": layer.get("chart"),
            }
            for layer in layers
        ],
        layer_names=names,
        learnable=learnable,
        concepts=concepts,
        min_positives=(doc.get("protocol") or {}).get("min_positives"),
        failed=[
            {"path": f.get("path"), "error": f.get("error")} for f in images.get("failed") or []
        ],
        failed_total=images.get("failed_count", 0),
    )


def label_layer_page(doc: Mapping[str, Any], layer: Mapping[str, Any]) -> bytes:
    """The page of one layer (``label/NN_layer.html``), as UTF-8."""
    metric = str(layer.get("metric", "auprc"))
    protocol = doc.get("protocol") or {}
    extra = [name for name in ("auprc", "f1", "pearson", "auc", "iou") if name != metric]
    records = layer.get("records") or []
    extra = [name for name in extra if any(name in r for r in records)]
    ordered = sorted(
        records,
        key=lambda r: (r.get("label") is None, -(r.get("score") or 0.0), int(r["unit"])),
    )
    rows = []
    for r in ordered:
        labels = r.get("labels") or []
        more = ", ".join(f"{e['concept']} ({num(e['score'])})" for e in labels[1:])
        if r.get("more"):
            more += (", " if more else "") + f"+{r['more']}"
        rows.append(
            {
                "unit": r["unit"],
                "label": r.get("label"),
                "concept": r.get("concept"),
                "score": num(r.get("score")),
                "p": _p(r.get("p")),
                "q": _p(r.get("q")),
                "positives": r.get("positives"),
                "extra": [num(r.get(name)) for name in extra],
                "more": more,
                "sheet": r.get("sheet"),
                "search": " ".join([str(r.get("label") or "")] + [e["concept"] for e in labels]),
            }
        )
    sheets = [
        {"unit": r["unit"], "label": r["label"], "score": num(r.get("score")), "sheet": r["sheet"]}
        for r in ordered
        if r.get("label") is not None and r.get("sheet")
    ][:SHEETS]
    unit = str(layer.get("unit", "unit"))
    meta = [
        MetaRow("model", str(doc.get("model", "?")), code=True),
        MetaRow("layer", f"{layer['layer']} ({layer.get('type')})", code=True),
        MetaRow(
            f"{unit}s",
            f"{layer['units']} ({layer['labelled']} labelled, {layer['unlabelled']} unlabelled)",
        ),
        *_meta(doc)[1:],
    ]
    return render(
        "label_layer.html",
        layer=layer,
        home="../label.html",
        base="../",
        **_weights(doc),
        meta=meta,
        unit=unit,
        metric_title=_TITLES.get(metric, metric),
        extra=[_TITLES.get(name, name) for name in extra],
        rows=rows,
        sheets=sheets,
        linked=any(r.get("sheet") for r in records),
        alpha=protocol.get("alpha"),
        top=protocol.get("top"),
        masks=bool(protocol.get("masks")),
        min_iou=(protocol.get("masks") or {}).get("min_iou"),
    )


def _p(value: Any) -> str:
    if value is None:
        return "\N{EN DASH}"
    v = float(value)
    return f"{v:.3g}" if v < 0.01 else f"{v:.3f}"
