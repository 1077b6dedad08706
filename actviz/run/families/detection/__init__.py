"""A detector in a run, in one place: its row (run.py: options, resume settings, the probe
that gives each image its detections), the watch on its own transform and heads (probe.py),
its class-activation maps (cam.py) and its per-image pictures (pictures.py). Its load row is
:data:`actviz.models.families.DETECTION`; its pure pictures are :mod:`actviz.render.detection`."""

from __future__ import annotations

from actviz.run.families.detection.pictures import DETECTION_CAM, DETECTION_HEADS, DETECTIONS
from actviz.run.families.detection.run import DETECTION_RUN

__all__ = ["DETECTIONS", "DETECTION_CAM", "DETECTION_HEADS", "DETECTION_RUN"]
