"""What ``label`` writes at the end, from what the passes gathered: per layer the analysis, the
concepts' learnability, ``labels.json``, a page and a chart per layer and ``label.html``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz import output
from actviz.label.analysis import (
    LayerLabels,
    analyse_layer,
    clean_scores,
    testable_concepts,
)
from actviz.label.chart import label_chart
from actviz.label.concepts import Concepts
from actviz.label.masks import IOU_SIDE, MaskSet, iou_grid
from actviz.label.metrics import METRICS
from actviz.label.options import LabelOptions
from actviz.label.probe import probe_auprc
from actviz.label.result import RECORD, LabelResult, LayerResult
from actviz.label.stream import Gathered, Pass
from actviz.report.label import label_index_page, label_layer_page

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.command.opening import Loaded

__all__ = ["PAGE", "RANDOM_NOTE", "write_outputs"]

PAGE = "label.html"
FOLDER = "label"
RANDOM_NOTE = "random weights: these labels describe an untrained model"
#: Failed images named in labels.json (all are counted).
SHOWN = 100


@dataclass(frozen=True)
class Analysed:
    """Every layer analysed, over the images scored.

    Attributes:
        ok: The images scored, in the folder's order.
        labels: ``(N, K)`` their concepts' labels.
        untestable: Per concept, why it is not tested, or None.
        layers: Per layer its analysis and its files' stem (``00_layer4``).
    """

    ok: list[str]
    labels: npt.NDArray[np.bool_]
    untestable: list[str | None]
    layers: list[tuple[LayerLabels, str]]


def write_outputs(
    cmd: Command,
    opened: Loaded,
    run: Pass,
    gathered: Gathered,
    concepts: Concepts,
    opts: LabelOptions,
    *,
    unit: str,
    masks: MaskSet | None,
    sheets_doc: Mapping[str, Any] | None,
    reused: int,
) -> LabelResult:
    """Analyse every layer and write every file; the result the command returns."""
    analysed = _analyse(cmd, run, gathered, concepts, opts, masks, sheets_doc)
    learnability = _learnability(gathered, analysed, opts)
    rows = _concept_rows(concepts, analysed, learnability, opts)
    document = _document(
        cmd,
        opened,
        run,
        gathered,
        concepts,
        opts,
        analysed,
        rows,
        unit=unit,
        masks=masks,
        reused=reused,
    )
    record = opts.out / RECORD
    output.write_json(record, document)
    random = bool(opened.model.weights.random)
    report = _pages(document, opts, random) if opts.report else None
    assert cmd.found is not None
    return LabelResult(
        model=cmd.model,
        out=opts.out,
        record=record,
        metric=str(document["metric"]),
        source=concepts.source,
        concepts=rows,
        layers=[
            LayerResult(
                key=layer["layer"],
                units=layer["units"],
                unit=unit,
                labelled=layer["labelled"],
                records=layer["records"],
                page=layer["page"],
                chart=layer["chart"],
            )
            for layer in document["layers"]
        ],
        images=len(analysed.ok),
        failed=_failed(gathered),
        random_weights=random,
        weights=opened.model.weights,
        report=report,
        skipped=list(cmd.found.skipped),
        warnings=list(cmd.warnings),
        reused=reused,
        seconds=cmd.seconds(),
        device=str(opened.model.device),
        alpha=opts.alpha,
    )


def _analyse(
    cmd: Command,
    run: Pass,
    gathered: Gathered,
    concepts: Concepts,
    opts: LabelOptions,
    masks: MaskSet | None,
    sheets_doc: Mapping[str, Any] | None,
) -> Analysed:
    """Every layer's labels over the images scored, in the folder's order (so a resumed run
    gives what an uninterrupted one gives)."""
    assert cmd.found is not None
    ok = [
        item.rel.as_posix() for item in cmd.found.images if item.rel.as_posix() in gathered.scores
    ]
    labels = concepts.labels[[run.index[name] for name in ok]]
    untestable = testable_concepts(labels, opts.min_positives)
    width = output.order_width(len(run.plans))
    layers: list[tuple[LayerLabels, str]] = []
    for order, (key, plan) in enumerate(run.plans.items()):
        scores = (
            np.stack([gathered.scores[name][key] for name in ok])
            if ok
            else np.zeros((0, plan.channels))
        )
        iou = _iou(gathered, key) if masks is not None else None
        sheets = _sheets(sheets_doc, opts, key, plan.channels, cmd)
        layer = analyse_layer(
            key, scores, labels, concepts.names, untestable, opts, iou=iou, sheets=sheets
        )
        if layer.nonfinite:
            cmd.warn(
                f"{layer.nonfinite} score(s) of layer {key} were NaN or infinite; NaN and "
                "-inf rank lowest, +inf highest"
            )
        stem = output.layer_filename(order, key, width=width).removesuffix(".png")
        layers.append((layer, stem))
    return Analysed(ok, labels, untestable, layers)


def _failed(gathered: Gathered) -> list[dict[str, Any]]:
    return sorted(gathered.failed.values(), key=lambda r: str(r["image"]))


def _document(
    cmd: Command,
    opened: Loaded,
    run: Pass,
    gathered: Gathered,
    concepts: Concepts,
    opts: LabelOptions,
    analysed: Analysed,
    rows: list[dict[str, Any]],
    *,
    unit: str,
    masks: MaskSet | None,
    reused: int,
) -> dict[str, Any]:
    """``labels.json`` (schema in docs/outputs.md)."""
    assert cmd.found is not None
    loaded = opened.model
    failed = _failed(gathered)
    layers = analysed.layers
    return {
        **cmd.head(opened),
        "command": "label",
        "random_weights": bool(loaded.weights.random),
        "unit": unit,
        "sae": str(opts.sae) if opts.sae else None,
        "source": _source(concepts),
        "metric": layers[0][0].metric if layers else opts.metric,
        "tested": opts.metric,
        "metrics": {
            **{
                name: {"title": row.title, "sane": row.sane, "note": row.note}
                for name, row in METRICS.items()
            },
            "iou": {
                "title": "IoU",
                "sane": True,
                "note": "intersection over union of the unit's marked pixels and the mask's",
            },
        },
        "protocol": _protocol(opts, masks, run),
        "concepts": rows,
        "images": {
            "count": len(cmd.found.images),
            "scored": len(analysed.ok),
            "reused": reused,
            "failed": failed[:SHOWN],
            "failed_count": len(failed),
            "skipped": [{"path": str(p), "reason": why} for p, why in cmd.found.skipped[:SHOWN]],
            "skipped_count": len(cmd.found.skipped),
        },
        "top_images": str(opts.top_images) if opts.top_images else None,
        "report": PAGE if opts.report else None,
        "warnings": list(cmd.warnings),
        "layers": [_layer_record(layer, stem, run, unit, opts, gathered) for layer, stem in layers],
        "seconds": round(cmd.seconds(), 3),
    }


def _iou(gathered: Gathered, key: str) -> npt.NDArray[np.float64]:
    """``(U, K)`` intersection over union, summed over the images (0 where both are empty)."""
    inter = gathered.intersect.get(key)
    if inter is None:
        return np.zeros((gathered.units[key], gathered.concepts))
    union = gathered.marked[key][:, None] + gathered.held[None, :] - inter
    result: npt.NDArray[np.float64] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
    return result


def _sheets(
    doc: Mapping[str, Any] | None, opts: LabelOptions, key: str, units: int, cmd: Command
) -> list[str | None] | None:
    """Per unit, its contact sheet in the ``--top-images`` folder, relative to the output
    folder; None without one (warned when that folder has no such layer)."""
    if doc is None or opts.top_images is None:
        return None
    layer = next((entry for entry in doc.get("layers") or [] if entry.get("name") == key), None)
    if layer is None:
        cmd.warn(
            f"{opts.top_images}/top-images.json has no layer {key}: its labels are not linked "
            f"to contact sheets (run top-images with --layers {key}"
            + (f" --sae {opts.sae}" if opts.sae else "")
            + ")"
        )
        return None
    channels = layer.get("channels") or []
    if len(channels) != units:
        cmd.warn(
            f"{opts.top_images}/top-images.json ranks {len(channels)} units of {key}, not "
            f"{units}: its sheets are of another model or dictionary, and are not linked"
        )
        return None
    out: list[str | None] = [None] * units
    for entry in channels:
        sheet, c = entry.get("sheet"), entry.get("channel")
        if isinstance(sheet, str) and isinstance(c, int) and 0 <= c < units:
            target = opts.top_images / sheet
            out[c] = Path(os.path.relpath(target, opts.out)).as_posix()
    return out


def _learnability(gathered: Gathered, analysed: Analysed, opts: LabelOptions) -> dict[str, Any]:
    """Per concept, a probe's AUPRC from each layer and from the pixels (empty when off)."""
    ok, labels = analysed.ok, analysed.labels
    if not opts.learnability or len(ok) < 4:
        return {}
    pixels = np.stack([gathered.pixels[name] for name in ok])
    found: dict[str, Any] = {"pixels": probe_auprc(pixels, labels, seed=opts.seed)}
    for layer, _ in analysed.layers:
        scores = np.stack([gathered.scores[name][layer.key] for name in ok])
        clean, _count = clean_scores(scores)
        found[layer.key] = probe_auprc(clean, labels, seed=opts.seed)
    return found


def _concept_rows(
    concepts: Concepts,
    analysed: Analysed,
    learnability: Mapping[str, Any],
    opts: LabelOptions,
) -> list[dict[str, Any]]:
    labels, untestable, layers = analysed.labels, analysed.untestable, analysed.layers
    n = labels.shape[0]
    rows = []
    for c, name in enumerate(concepts.names):
        positives = int(labels[:, c].sum())
        probe = None
        if learnability:
            probe = {
                "base": _number(positives / n) if n else None,
                "pixels": _number(learnability["pixels"][c]),
                "layers": {
                    analysed.key: _number(learnability[analysed.key][c]) for analysed, _ in layers
                },
            }
        rows.append(
            {
                "concept": name,
                "positives": positives,
                "negatives": n - positives,
                "tested": untestable[c] is None,
                "reason": untestable[c],
                "units": {
                    analysed.key: int(sum(1 for r in analysed.records if r["label"] == name))
                    for analysed, _ in layers
                },
                "chance": _number(METRICS[opts.metric].chance(n, positives, opts.fire)),
                "learnability": probe,
            }
        )
    return rows


def _source(concepts: Concepts) -> dict[str, Any]:
    return {
        "kind": concepts.source,
        "file": concepts.file,
        "unmatched": concepts.unmatched,
        "unmatched_count": concepts.unmatched_count,
        **concepts.extra,
    }


def _protocol(opts: LabelOptions, masks: MaskSet | None, run: Pass) -> dict[str, Any]:
    protocol: dict[str, Any] = {
        "score": opts.score,
        "tested": opts.metric,
        "permutations": opts.permutations,
        "seed": opts.seed,
        "alpha": opts.alpha,
        "correction": "Benjamini-Hochberg over every unit and tested concept of a layer",
        "p_value": "(1 + permutations scoring at least as high) / (1 + permutations)",
        "fire": opts.fire,
        "min_positives": opts.min_positives,
        "top": opts.top,
        "learnability": (
            {
                "probe": "ridge, strength by leave-one-out per concept, standardised features",
                "folds": 5,
                "scored_by": "auprc",
                "pixels": "each image reduced to 8 x 8 per colour (192 values)",
            }
            if opts.learnability
            else None
        ),
    }
    if masks is not None:
        protocol["masks"] = {
            "quantile": opts.quantile,
            "min_iou": opts.min_iou,
            "grid": list(iou_grid(run.loaded.input_size)),
            "grid_side": IOU_SIDE,
            "threshold": "exact: each unit's value at its top quantile of map values",
            "upsampling": "bilinear",
            "p_value": f"{opts.metric} of the unit's score against the mask's presence",
        }
    return protocol


def _layer_record(
    analysed: LayerLabels,
    stem: str,
    run: Pass,
    unit: str,
    opts: LabelOptions,
    gathered: Gathered,
) -> dict[str, Any]:
    plan = run.plans[analysed.key]
    thresholds = gathered.thresholds.get(analysed.key)
    return {
        "layer": analysed.key,
        "module": plan.module,
        "type": plan.module_type,
        "maps": [plan.channels, plan.height, plan.width],
        "layout": plan.layout,
        "units": analysed.units,
        "unit": unit,
        "metric": analysed.metric,
        "labelled": analysed.labelled_units,
        "unlabelled": analysed.units - analysed.labelled_units,
        "tests": int(np.isfinite(analysed.p).sum()),
        "discoveries": int(analysed.labelled.sum()),
        "nonfinite": analysed.nonfinite,
        "page": f"{FOLDER}/{stem}.html" if opts.report else None,
        "chart": f"{FOLDER}/{stem}.png" if opts.report else None,
        "thresholds": None
        if thresholds is None
        else [float(f"{v:.6g}") for v in thresholds.tolist()],
        "records": analysed.records,
        "tables": {
            name: [[_number(v) for v in row] for row in table.tolist()]
            for name, table in {**analysed.values, "p": analysed.p, "q": analysed.q}.items()
        },
    }


def _pages(document: dict[str, Any], opts: LabelOptions, random: bool) -> Path:
    """Each layer's chart and page, then ``label.html``."""

    for layer in document["layers"]:
        title = (
            f"label: {document['model']} at {layer['layer']}, {document['images']['scored']} images"
        )
        output.write_bytes(
            opts.out / layer["chart"],
            label_chart(layer, document["concepts"], title=title, random=random),
        )
        output.write_bytes(opts.out / layer["page"], label_layer_page(document, layer))
    path = opts.out / PAGE
    output.write_bytes(path, label_index_page(document))
    return path


def _number(value: Any) -> float | None:
    v = float(value)
    return None if not np.isfinite(v) else float(f"{v:.6g}")
