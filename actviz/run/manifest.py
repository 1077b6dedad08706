"""A run's ``manifest.json`` and its ledger's records: the run as JSON-ready data, and back.

The manifest holds the run's facts and its per-layer summaries; its size depends on the layers,
not on the images. Each image's record is a line of the run's ledger
(:class:`actviz.run.records.RunRecords`), written as the image finishes; its statistics are also a
row per layer of ``stats.parquet``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from actviz.command.head import json_head, model_fields
from actviz.results import ImageResult, LayerResult, Prediction
from actviz.run.pictures import PICTURE_KINDS
from actviz.run.records import RunRecords
from actviz.run.result import RunResult

__all__ = ["image_from_record", "image_record", "manifest"]


def manifest(result: RunResult) -> dict[str, Any]:
    """The run as JSON-ready data: what ``manifest.json`` holds."""
    # The libraries' versions are in the head; model_info holds the rest of the record.
    info = {k: v for k, v in result.model_info.items() if k != "versions"} or None
    model = model_fields(result.model, info, result.weights, result.weights_warning)
    return {
        **json_head(infos=[result.model_info], device=result.device, model=model),
        "selector": result.selector,
        "layers": result.layers,
        "render": result.render,
        "stats": "stats.json" if result.stats is not None else None,
        "report": "index.html" if result.report is not None else None,
        "options": result.options,
        "seconds": round(result.seconds, 3),
        "images": {
            "count": len(result.images),
            "ok": result.count("ok"),
            "reused": result.count("reused"),
            "failed": result.count("failed"),
            # One line per image, its full record after the first tab (``read_images``).
            "records": RunRecords.FILE,
            "table": _table(result.stats),
        },
        "files": {"grids": result.counts.grids, "all": result.counts.files},
        "skipped": [{"path": str(p), "reason": why} for p, why in result.skipped],
        "warnings": result.warnings,
        "notes": result.notes,
        "undrawable": [{"layer": k, "reason": v} for k, v in result.undrawable.items()],
        "pca": result.pca or None,
        # The run's gradient-flow chart (--grads), relative to the output folder.
        "gradient_flow": result.gradient_flow.name if result.gradient_flow is not None else None,
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
        "pictures": dict(result.pictures),
        # What the family records of the image (a detector's detections and pictures).
        **result.extras,
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
                **({"cam_method": layer.cam_method} if layer.cam_method else {}),
                # Only token layers whose grid shows prefix tokens carry the count.
                **({"prefix_tokens": layer.prefix_tokens} if layer.prefix_tokens else {}),
            }
            for layer in result.layers
        ],
    }


def image_from_record(record: Mapping[str, Any], stub: ImageResult) -> ImageResult:
    """The image a record describes (the inverse of :func:`image_record`), with the stub's
    status (an image an earlier run did is ``reused`` in this one) and ledger offset."""
    return ImageResult(
        path=stub.path,
        out_dir=stub.out_dir,
        status=stub.status,
        error=record.get("error"),
        size=tuple(record["size"]) if record.get("size") else None,
        thumbnail=record.get("thumbnail"),
        gradient_flow=record.get("gradient_flow"),
        note=record.get("note"),
        pictures=dict(record.get("pictures") or {}),
        extras={k: v for k, v in record.items() if k not in _image_keys()},
        record=stub.record,
        predictions=[
            Prediction(p["index"], p["label"], nan_if_none(p["probability"]))
            for p in record.get("predictions") or []
        ],
        layers=[
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
                cam_method=x.get("cam_method"),
                prefix_tokens=x.get("prefix_tokens", 0),
            )
            for x in record.get("layers") or []
        ],
    )


@functools.cache
def _image_keys() -> frozenset[str]:
    """The keys every image's record has; the others are what its model's family recorded."""
    return frozenset(image_record(ImageResult(Path(), PurePosixPath())))


def _table(stats: Mapping[str, Any] | None) -> str | None:
    """The per-image statistics table that ``stats.json`` points at, if any."""
    images = (stats or {}).get("images")
    return images.get("table") if isinstance(images, dict) else None


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)
