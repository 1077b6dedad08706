"""Diagnostics of a run: statistics computed in the hooks, and ``stats.json``/``stats.csv``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.results import ImageResult

if TYPE_CHECKING:
    from actviz.stats.anomalies import Thresholds

__all__ = ["stats_callback", "write_stats"]


def stats_callback(contexts: Mapping[str, Any]) -> Callable[[str, Any], Any]:
    """Statistics per image of a captured batch, computed where the tensor is."""
    from actviz.stats.compute import compute_stats, default_channel_dim

    def summarize(module: str, tensor: Any) -> Any:
        ctx = contexts.get(module)
        channels_last = tensor.ndim == 4 and ctx is not None and ctx.channels_last
        dim = -1 if channels_last else default_channel_dim(tensor.shape)
        try:
            return compute_stats(tensor, channel_dim=dim)
        except ValueError:  # complex or 0-d outputs: nothing to summarize
            return None

    return summarize


def write_stats(
    out_dir: Path, results: Sequence[ImageResult], thresholds: Thresholds | None
) -> dict[str, Any]:
    """``stats.json`` and ``stats.csv`` for every image drawn or reused, and the run."""
    from actviz import output
    from actviz.stats.anomalies import Thresholds
    from actviz.stats.files import stats_rows, to_csv, to_json
    from actviz.stats.layerstats import LayerStats, aggregate_run

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
