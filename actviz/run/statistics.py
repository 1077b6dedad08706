"""A run's statistics files: ``stats.json`` and ``stats.csv``, from its image results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.results import ImageResult

if TYPE_CHECKING:
    from actviz.stats import Thresholds

__all__ = ["write_stats"]


def write_stats(
    out_dir: Path, results: Sequence[ImageResult], thresholds: Thresholds | None
) -> dict[str, Any]:
    """``stats.json`` and ``stats.csv`` for every image drawn or reused, and the run."""
    from actviz import output
    from actviz.stats import LayerStats, Thresholds, aggregate_run, stats_rows, to_csv, to_json

    limits = thresholds or Thresholds()
    per_image = {
        result.out_dir.as_posix(): [
            (layer.key, LayerStats.from_dict(layer.stats))
            for layer in result.layers
            if layer.stats is not None
        ]
        for result in results
        if result.status in ("ok", "reused")
    }
    per_image = {key: layers for key, layers in per_image.items() if layers}
    run = aggregate_run(per_image) if len(per_image) > 1 else None
    doc = to_json(per_image, run, thresholds=limits)
    gradients = {
        result.out_dir.as_posix(): {x.key: x.gradient for x in result.layers if x.gradient}
        for result in results
    }
    if any(gradients.values()):
        doc["gradients"] = {key: value for key, value in gradients.items() if value}
    output.write_json(out_dir / "stats.json", doc)
    csv_text = to_csv(stats_rows(per_image, run, thresholds=limits))
    output.write_bytes(out_dir / "stats.csv", csv_text.encode("utf-8", "backslashreplace"))
    return doc
