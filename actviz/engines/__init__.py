"""Engines: what any command needs to run its per-batch work on a pool of Ray actors (the
``ray`` extra) and merge the results on the driver. Each command's worker lives with its
command (``actviz.run.on_ray``, ``actviz.top_images.on_ray``); the local engine is each command's
own loop and needs nothing here. Importing this package never imports ray."""

from __future__ import annotations

from actviz.engines.ray_data import RayOptions, WorkerSpec, ray_batches

__all__ = [
    "RayOptions",
    "WorkerSpec",
    "ray_batches",
]
