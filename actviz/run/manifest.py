"""A run's ``manifest.json``: the run as JSON-ready data."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from actviz._version import __version__
from actviz.results import RunResult, image_record
from actviz.session import versions_record, weights_record

__all__ = ["manifest"]


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
