"""Grad-CAM of a video layer, frame by frame: one map per frame of the layer's
``(C, T, H, W)`` output, blended over the input frame it covers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.render.overlay import cam_panel, input_view
from actviz.render.png import picture_png
from actviz.render.timestrips import frame_columns
from actviz.run.job import ImageJob, headed, header_notes
from actviz.run.record import Drawn

if TYPE_CHECKING:
    import numpy as np

__all__ = ["clip_cam", "clip_cam_picture", "input_frame"]

#: Frames of a clip's Grad-CAM picture at most (spread evenly).
CAM_FRAMES = 8


def clip_cam(activation: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Grad-CAM of a clip: channel weights from the gradient's mean over time and space (as
    for a 3-D convolution), ``ReLU(sum_c w_c A_c[t])`` per frame, scaled by the largest value
    of all frames (so frames compare; an all-zero map stays zero). ``(C, T, H, W)`` in,
    ``(T, H, W)`` out."""

    weights = gradient.reshape(gradient.shape[0], -1).mean(axis=1)
    cam = np.maximum(np.tensordot(weights, activation, axes=(0, 0)), 0.0).astype(np.float32)
    top = float(cam.max()) if cam.size else 0.0
    return cam / top if top > 0 else cam


def input_frame(layer_frame: int, layer_frames: int, input_frames: int) -> int:
    """The input frame at the middle of the time a layer's frame covers."""
    return min(input_frames - 1, int((layer_frame + 0.5) * input_frames / layer_frames))


def clip_cam_picture(
    job: ImageJob, cap: Any, activation: Any, gradient: Any, name: str
) -> Drawn | None:
    """The picture: for each shown frame, the input frame with its map blended over it
    (``name``: the target class, as the header says it)."""

    from actviz.render.legend import Header

    x = job.model_input
    if x is None or x.ndim != 4 or activation.ndim != 4:
        return None
    cam = clip_cam(activation, gradient)
    frames = int(cam.shape[0])
    shown = frame_columns(frames, CAM_FRAMES)
    panels = []
    for t in shown:
        k = input_frame(t, frames, int(x.shape[1]))
        view = input_view(x[:, k].numpy(), list(job.mean), list(job.std))
        factor = max(1, -(-112 // max(view.size)))
        if factor > 1:
            view = view.resize((view.width * factor, view.height * factor))
        panel = cam_panel(view, [(f"frame {t} (input {k})", cam[t])], include_view=False)
        panels.append(panel)
    gap = np.full((panels[0].shape[0], 4, 3), 40, dtype=np.uint8)
    pixels = np.concatenate([p for panel in panels for p in (panel, gap)][:-1], axis=1)
    zero = "" if cam.any() else "the Grad-CAM map is all zero"
    header = Header(
        title=f"{cap.key}   {cap.module_type}   Grad-CAM per frame",
        info=f"{name}  |  {len(shown)} of {frames} frames  |  one scale: the largest of all frames",
        labels=("0", "max"),
        nonfinite=False,
        notes=tuple(header_notes(job, zero or None)),
    )
    return Drawn(picture_png(headed(pixels, header, "jet")), {"cam_note": zero or None})
