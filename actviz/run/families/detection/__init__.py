"""A detector in a run: the watch on its own transform and heads (probe.py), its class-activation
maps (cam.py) and its per-image pictures (pictures.py)."""

from __future__ import annotations

from actviz.run.families.detection.pictures import DETECTION_CAM, DETECTION_HEADS, DETECTIONS

__all__ = ["DETECTIONS", "DETECTION_CAM", "DETECTION_HEADS"]
