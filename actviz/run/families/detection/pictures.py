"""A detector's per-image pictures: its detections drawn on what the model saw
(``<image>/detections.png``), the first detections' head outputs (``detection_heads.png``),
and its class-activation maps (``detection_cam.png``, with ``--cam``).

Each reads the image's job extras: ``detections`` (:class:`~.probe.Found`) and, with
``--cam``, ``detection_cams`` (:class:`~.cam.DetectionCams`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from actviz.render.detection import Detection, detection_colour, detection_picture, heads_picture
from actviz.render.overlay import LABEL_HEIGHT, PANEL_GAP, cam_panel
from actviz.render.png import picture_png
from actviz.run.families.base import ImageKind
from actviz.run.job import ImageJob, header_notes, model_view

if TYPE_CHECKING:
    from PIL import Image

    from actviz.run.families.detection.cam import DetectionCams
    from actviz.run.families.detection.probe import Found

__all__ = ["DETECTIONS", "DETECTION_CAM", "DETECTION_HEADS"]

#: Detections drawn at most, highest score first (the record holds all of them).
_DRAWN = 20

#: The person skeleton of COCO keypoints (torchvision's keypoint order), 0-based.
_COCO_SKELETON = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip


def _found(job: ImageJob) -> Found | None:
    """The image's detections, when the job is a detector's and can be drawn."""
    if not job.options.grids or job.model_input is None:
        return None
    found: Found | None = job.extras.get("detections")
    return found


def _scale(job: ImageJob, view: Image.Image) -> tuple[float, float]:
    """How the view's pixels relate to the image's, whose pixels the boxes are in: the view
    is the image at the size the detector's transform resized it to."""
    assert job.model_input is not None
    height, width = job.model_input.shape[-2:]
    return view.width / int(width), view.height / int(height)


def _box(box: Any, scale: tuple[float, float]) -> tuple[float, float, float, float]:
    """A box in the image's pixels, in the view's."""
    sx, sy = scale
    return (float(box[0]) * sx, float(box[1]) * sy, float(box[2]) * sx, float(box[3]) * sy)


def _in_view(found: Found, i: int, view: Image.Image) -> Any:
    """Detection ``i``'s mask (in the image's pixels) resized to the view; None without."""

    if found.masks is None:
        return None
    mask = found.masks[i]
    if mask.shape == (view.height, view.width):
        return mask
    resized = PILImage.fromarray(mask.astype(np.float32)).resize(  # mode F: floats
        view.size, PILImage.Resampling.BILINEAR
    )
    return np.asarray(resized)


def detections_png(job: ImageJob) -> bytes:
    """The detections drawn on what the model saw, under a title that gives the threshold
    and notes that say why little is drawn."""

    found = job.extras["detections"]
    view = model_view(job)
    scale = _scale(job, view)
    shown = min(len(found.scores), _DRAWN)
    drawn = [
        Detection(
            box=_box(box, scale),
            label=f"{name} {score:.2f}",
            mask=_in_view(found, i, view),
            keypoints=None
            if found.keypoints is None
            else found.keypoints[i] * [scale[0], scale[1], 1.0],
        )
        for i, (box, name, score) in enumerate(
            zip(found.boxes[:shown], found.names[:shown], found.scores[:shown], strict=True)
        )
    ]
    count = len(found.scores)
    title = (
        f"detections: {count} with a score of {found.threshold:g} or more "
        f"(of {found.returned} the model returned)"
    )
    notes = []
    if not count:
        notes.append(
            f"no detection scores {found.threshold:g} or more; --score-threshold lowers the cut"
        )
    elif shown < count:
        notes.append(f"the {shown} highest scores are drawn; all {count} are in the record")
    skeleton = _COCO_SKELETON if found.keypoints is not None else ()
    picture = detection_picture(
        view, drawn, title=title, notes=header_notes(job, *notes), skeleton=skeleton
    )
    return picture_png(picture, job.options.png_compression)


def heads_png(job: ImageJob) -> bytes:
    """The first detections' rows: the box's crop, then each per-detection head output."""

    found, view = job.extras["detections"], model_view(job)
    scale = _scale(job, view)
    rows = []
    for rank, panels in enumerate(found.heads):
        x1, y1, x2, y2 = _box(found.boxes[rank], scale)
        crop = view.crop((int(x1), int(y1), max(int(x2), int(x1) + 1), max(int(y2), int(y1) + 1)))
        rows.append((f"#{rank + 1} {found.names[rank]} {found.scores[rank]:.2f}", crop, panels))
    notes = ["each row a detection: its box, then what the model's heads computed for it"]
    for rank_panels in found.heads[:1]:
        for name, heat in rank_panels:
            if name == "box features":
                length = int(heat.size)
                notes.append(
                    f"box features: the box head's {length} values for its box, "
                    f"{heat.shape[0]} x {heat.shape[1]} row by row"
                )
            elif name == "mask logits":
                notes.append("mask logits: of its class")
            elif name.startswith("keypoints"):
                notes.append("keypoints, max: the maximum over its keypoint heatmaps")
    picture = heads_picture(rows, title="per-detection heads", notes=header_notes(job, *notes))
    return picture_png(picture)


def cam_png(job: ImageJob) -> bytes | None:
    """The input, EigenCAM and the Grad-CAM of one detection (its box outlined), side by
    side under a header; None without any map."""

    found: Found = job.extras["detections"]
    cams: DetectionCams = job.extras["detection_cams"]
    view = model_view(job)
    panels: list[tuple[str, Any]] = []
    if cams.eigen is not None:
        panels.append(("EigenCAM (no target)", cams.eigen.numpy()))
    if cams.grad is not None:
        name, score = found.names[cams.rank], found.scores[cams.rank]
        panels.append((f"Grad-CAM of #{cams.rank + 1}: {name} {score:.2f}", cams.grad.numpy()))
    if not panels:
        return None
    picture = PILImage.fromarray(cam_panel(view, panels))
    if cams.grad is not None:  # the explained detection, outlined on its panel
        box = _box(found.boxes[cams.rank], _scale(job, view))
        _outline(picture, view, len(panels), box, cams.rank)
    notes = [f"maps from {cams.source}, over the input the model saw"]
    if cams.grad is None:
        notes.append(
            f"no detection #{cams.rank + 1} at a score of {found.threshold:g} or more to "
            "explain with Grad-CAM; --score-threshold lowers the cut"
        )
    framed = detection_picture(
        picture, [], title="class activation maps", notes=header_notes(job, *notes)
    )
    return picture_png(framed, job.options.png_compression)


def _outline(
    picture: Image.Image,
    view: Image.Image,
    panels: int,
    box: tuple[float, float, float, float],
    rank: int,
) -> None:
    """Outline detection ``rank``'s ``box`` (in the view's pixels) on the last of
    ``panels`` panels after the input."""

    draw = ImageDraw.Draw(picture)
    offset = panels * (view.width + PANEL_GAP)
    x1, y1, x2, y2 = box
    box = (offset + x1, LABEL_HEIGHT + y1, offset + x2, LABEL_HEIGHT + y2)
    draw.rectangle(box, outline=detection_colour(rank), width=2)


#: The detections drawn on what the model saw; the record's ``detections_file``.
DETECTIONS = ImageKind(
    "detections",
    wanted=lambda job: _found(job) is not None,
    make=detections_png,
    record="detections_file",
)

#: The first detections' per-detection head outputs; the record's ``detection_heads_file``.
DETECTION_HEADS = ImageKind(
    "detection_heads",
    wanted=lambda job: any(getattr(_found(job), "heads", None) or ()),
    make=heads_png,
    record="detection_heads_file",
)

#: EigenCAM and one detection's Grad-CAM (``--cam``); the record's ``detection_cam_file``.
DETECTION_CAM = ImageKind(
    "detection_cam",
    wanted=lambda job: _found(job) is not None and job.extras.get("detection_cams") is not None,
    make=cam_png,
    record="detection_cam_file",
)
