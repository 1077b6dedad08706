"""Gradients: the gradient recorder, the backward pass, Grad-CAM maps, and gradient-flow charts.

The per-layer pictures drawn from them (gradient grids, Grad-CAM pictures) are a run's, in
:mod:`actviz.run.gradients`."""

from __future__ import annotations

from actviz.gradients.batch import backward, choose_cam_keys
from actviz.gradients.cam import class_cams, grad_cam, to_nchw
from actviz.gradients.core import compute_gradients
from actviz.gradients.gradient_flow import EXPLODING, VANISHING, gradient_flow_png
from actviz.gradients.recorder import GradientRecorder

__all__ = [
    "EXPLODING",
    "GradientRecorder",
    "VANISHING",
    "backward",
    "choose_cam_keys",
    "class_cams",
    "compute_gradients",
    "grad_cam",
    "gradient_flow_png",
    "to_nchw",
]
