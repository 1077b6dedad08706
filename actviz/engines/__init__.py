"""Engines: where a run's per-batch work runs. The local engine streams a folder through the
model in this process and needs nothing more; the Ray engine (the ``ray`` extra) runs the same
per-batch summaries on a pool of actors and merges them into the same files. Importing this
package never imports ray."""

from __future__ import annotations

from actviz.engines.examples import BatchCandidates, candidates_on_ray, example_candidates
from actviz.engines.local import Plan, capture_and_render
from actviz.engines.ray_data import INSTALL_HINT, RayOptions, WorkerSpec, ray_batches, require_ray
from actviz.engines.stats import ImageSummary, stats_on_ray, stats_summaries

__all__ = [
    "INSTALL_HINT",
    "BatchCandidates",
    "ImageSummary",
    "Plan",
    "RayOptions",
    "WorkerSpec",
    "candidates_on_ray",
    "capture_and_render",
    "example_candidates",
    "ray_batches",
    "require_ray",
    "stats_on_ray",
    "stats_summaries",
]
