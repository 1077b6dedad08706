"""A run's ``manifest.json`` and resume records: the run as JSON-ready data, and back."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from actviz._version import __version__
from actviz.results import ImageResult, LayerResult, Prediction, RunResult
from actviz.run.pictures import PICTURE_KINDS
from actviz.session import versions_record, weights_record

__all__ = ["image_record", "manifest", "reuse_earlier"]


def manifest(result: RunResult) -> dict[str, Any]:
    """The run as JSON-ready data: what ``manifest.json`` holds."""
    return {
        "actviz": __version__,
        "versions": versions_record(result.model_info.get("versions")),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": result.model,
        "model_info": {k: v for k, v in result.model_info.items() if k != "versions"} or None,
        "weights": weights_record(result.weights, result.weights_warning),
        "device": result.device,
        "selector": result.selector,
        "layers": result.layers,
        "render": result.render,
        "stats": "stats.json" if result.stats is not None else None,
        "report": "index.html" if result.report is not None else None,
        "options": result.options,
        "seconds": round(result.seconds, 3),
        "images": [image_record(r) for r in result.images],
        "skipped": [{"path": str(p), "reason": why} for p, why in result.skipped],
        "warnings": result.warnings,
        "notes": result.notes,
        "undrawable": [{"layer": k, "reason": v} for k, v in result.undrawable.items()],
        "pca": result.pca or None,
    }


def image_record(result: ImageResult) -> dict[str, Any]:
    """One image of the run as ``manifest.json`` and the resume records hold it."""
    return {
        "path": str(result.path),
        "out_dir": str(result.out_dir),
        "status": result.status,
        "error": result.error,
        "size": list(result.size) if result.size else None,
        "thumbnail": result.thumbnail,
        "gradient_flow": result.gradient_flow,
        "note": result.note,
        "predictions": [
            {"index": p.index, "label": p.label, "probability": _finite(p.probability)}
            for p in result.predictions
        ],
        "layers": [
            {
                "name": layer.key,
                "module": layer.module,
                "type": layer.module_type,
                "call": layer.call,
                "shape": list(layer.shape),
                "min": _finite(layer.min),
                "max": _finite(layer.max),
                "mean": _finite(layer.mean),
                "channels_shown": layer.channels_shown,
                "channels_total": layer.channels_total,
                "channels": layer.channels,
                **{kind.record_key: layer.pictures.get(kind.name) for kind in PICTURE_KINDS},
                "kind": layer.kind,
                "layout": layer.layout,
                "note": layer.note,
                "tensor": layer.tensor_file,
                "stats": layer.stats,
                "gradient": layer.gradient,
                "cam_note": layer.cam_note,
                # Only token layers whose grid shows prefix tokens carry the count.
                **({"prefix_tokens": layer.prefix_tokens} if layer.prefix_tokens else {}),
            }
            for layer in result.layers
        ],
    }


def reuse_earlier(
    done: Mapping[tuple[str, str], Mapping[str, Any]], results: list[ImageResult]
) -> None:
    """Mark images an earlier run completed (same settings, files still there) as reused,
    restoring what it recorded for them: the inverse of :func:`image_record`."""
    for result in results:
        earlier = done.get((str(result.path), result.out_dir.as_posix()))
        if earlier is None:
            continue
        result.status = "reused"
        result.size = tuple(earlier["size"]) if earlier.get("size") else None
        result.thumbnail = earlier.get("thumbnail")
        result.note = earlier.get("note")
        result.predictions = [
            Prediction(p["index"], p["label"], nan_if_none(p["probability"]))
            for p in earlier["predictions"]
        ]
        result.layers = [
            LayerResult(
                key=x["name"],
                module=x["module"],
                module_type=x["type"],
                call=x["call"],
                shape=tuple(x["shape"]),
                min=nan_if_none(x["min"]),
                max=nan_if_none(x["max"]),
                mean=nan_if_none(x["mean"]),
                channels_shown=x["channels_shown"],
                channels_total=x["channels_total"],
                file=x["file"],
                pictures={k.name: x[k.record_key] for k in PICTURE_KINDS if x.get(k.record_key)},
                note=x.get("note"),
                kind=x.get("kind", "output"),
                layout=x.get("layout"),
                tensor_file=x.get("tensor"),
                stats=x.get("stats"),
                gradient=x.get("gradient"),
                channels=x.get("channels"),
                cam_note=x.get("cam_note"),
                prefix_tokens=x.get("prefix_tokens", 0),
            )
            for x in earlier["layers"]
        ]


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)
