"""Gradients: the gradient recorder, gradient grids, Grad-CAM, and gradient-flow charts."""

from __future__ import annotations

from actviz.gradients.batch import backward, choose_cam_keys, write_flow_chart, write_run_flow_chart
from actviz.gradients.cam import CamLayout, ClassCam, class_cams, grad_cam, to_nchw
from actviz.gradients.core import (
    CLASS_TOKEN_NOTE,
    GradientResult,
    compute_gradients,
    explain_zero_gradients,
    resolve_targets,
    zero_cam_note,
    zero_classifier,
)
from actviz.gradients.flowchart import EXPLODING, VANISHING, gradient_flow_png
from actviz.gradients.pictures import class_name, draw_gradient
from actviz.gradients.recorder import GradientCapture, GradientRecorder

__all__ = [
    "CLASS_TOKEN_NOTE",
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
    "class_name",
    "compute_gradients",
    "draw_gradient",
    "explain_zero_gradients",
    "grad_cam",
    "gradient_flow_png",
    "resolve_targets",
    "to_nchw",
    "write_flow_chart",
    "write_run_flow_chart",
    "zero_cam_note",
    "zero_classifier",
]
