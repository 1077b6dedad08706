"""Gradients: the gradient recorder, the backward pass, Grad-CAM maps, and gradient-flow charts.

The per-layer pictures drawn from them (gradient grids, Grad-CAM pictures) are a run's, in
:mod:`actviz.run.gradients`."""

from __future__ import annotations

from actviz.gradients.batch import backward, choose_cam_keys
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
    "compute_gradients",
    "explain_zero_gradients",
    "grad_cam",
    "gradient_flow_png",
    "resolve_targets",
    "to_nchw",
    "zero_cam_note",
    "zero_classifier",
]
