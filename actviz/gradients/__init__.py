"""Gradients: the gradient recorder, gradient grids, Grad-CAM, and gradient-flow charts."""

from __future__ import annotations

from actviz.gradients.batch import backward, choose_cam_keys, write_flow_chart, write_run_flow_chart
from actviz.gradients.cam import CamLayout, ClassCam, class_cams, grad_cam, to_nchw
from actviz.gradients.core import GradientResult, compute_gradients, resolve_targets
from actviz.gradients.flowchart import EXPLODING, VANISHING, gradient_flow_png
from actviz.gradients.recorder import GradientCapture, GradientRecorder

__all__ = [
    "CamLayout",
    "ClassCam",
    "EXPLODING",
    "GradientCapture",
    "GradientRecorder",
    "GradientResult",
    "VANISHING",
    "backward",
    "choose_cam_keys",
    "class_cams",
    "compute_gradients",
    "grad_cam",
    "gradient_flow_png",
    "resolve_targets",
    "to_nchw",
    "write_flow_chart",
    "write_run_flow_chart",
]
