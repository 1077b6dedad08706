"""A detector's detections drawn on the image it saw: labelled boxes, instance masks blended
in, keypoints as dots joined by the skeleton when one is given. Pure: arrays in, a picture out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from actviz.render.legend import font, line_height
from actviz.render.palette import colormap_lut
from actviz.render.theme import BACKGROUND_RGB, CAPTION_SIZE, MUTED_RGB, PAD, TEXT_RGB

__all__ = ["HEAD_PANEL", "Detection", "detection_colour", "detection_picture", "heads_picture"]

_MASK_ALPHA = 0.45
#: Distinct colours (matplotlib's tab10 and the bright half of tab20), one per detection rank.
_COLOURS = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
    (174, 199, 232), (255, 187, 120), (152, 223, 138), (255, 152, 150), (197, 176, 213),
)  # fmt: skip


@dataclass(frozen=True)
class Detection:
    """One detection in the coordinates of the picture it is drawn on.

    Attributes:
        box: ``(x1, y1, x2, y2)`` in pixels.
        label: What the box is labelled with (``dog 0.87``).
        mask: ``(H, W)`` soft mask in 0..1 over the whole picture (Mask R-CNN), or None.
        keypoints: ``(K, 3)`` rows of ``x, y, visibility`` (Keypoint R-CNN), or None.
    """

    box: tuple[float, float, float, float]
    label: str
    mask: npt.NDArray[np.float32] | None = None
    keypoints: npt.NDArray[np.float32] | None = None


def detection_colour(rank: int) -> tuple[int, int, int]:
    """The colour of the ``rank``-th detection (0: the highest score)."""
    return _COLOURS[rank % len(_COLOURS)]


def detection_picture(
    view: Image.Image,
    detections: Sequence[Detection],
    *,
    title: str = "",
    notes: Sequence[str] = (),
    skeleton: Sequence[tuple[int, int]] = (),
) -> Image.Image:
    """The picture with each detection drawn on it, under title and note lines.

    Args:
        view: What the model saw, ``W x H``.
        detections: Highest score first; each gets its own colour.
        title: The first line above the picture.
        notes: Further lines (the threshold, random weights, why nothing is drawn).
        skeleton: Pairs of keypoint indices to join with lines.

    Returns:
        An RGB picture: the lines, then the view with masks blended in, boxes outlined and
        labelled, keypoints marked.
    """
    rgb = np.asarray(view.convert("RGB"), dtype=np.float32)
    for rank, found in enumerate(detections):
        if found.mask is not None and found.mask.shape == rgb.shape[:2]:
            # Mask R-CNN's masks are probabilities: torchvision draws them cut at 0.5 too.
            weight = (np.clip(found.mask, 0.0, 1.0) >= 0.5)[..., None] * _MASK_ALPHA
            rgb = rgb * (1 - weight) + np.asarray(detection_colour(rank)) * weight
    picture = Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    face = font(CAPTION_SIZE)
    text_h = line_height(CAPTION_SIZE)
    for rank, found in enumerate(detections):
        colour = detection_colour(rank)
        x1, y1, x2, y2 = (float(v) for v in found.box)
        draw.rectangle((x1, y1, x2, y2), outline=colour, width=2)
        if found.keypoints is not None:
            _keypoints(draw, found.keypoints, colour, skeleton)
        width = int(face.getlength(found.label)) + 4
        top = y1 - text_h - 2 if y1 - text_h - 2 >= 0 else y1  # inside the box at the edge
        # Moved left where it would run past the picture's right edge, whole.
        left = max(0.0, min(x1, picture.width - width))
        draw.rectangle((left, top, left + width, top + text_h + 1), fill=colour)
        draw.text((left + 2, top), found.label, font=face, fill=(255, 255, 255))
    lines = [line for line in (title, *notes) if line]
    head_h = PAD + len(lines) * (text_h + 4) if lines else 0
    text_w = max((int(face.getlength(line)) for line in lines), default=0) + 2 * PAD
    canvas = Image.new("RGB", (max(picture.width, text_w), head_h + picture.height), BACKGROUND_RGB)
    canvas_draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        colour = TEXT_RGB if i == 0 else MUTED_RGB
        canvas_draw.text((PAD, PAD + i * (text_h + 4)), line, font=face, fill=colour)
    canvas.paste(picture, (0, head_h))
    return canvas


def _keypoints(
    draw: ImageDraw.ImageDraw,
    points: npt.NDArray[np.float32],
    colour: tuple[int, int, int],
    skeleton: Sequence[tuple[int, int]],
) -> None:
    """Visible keypoints as dots, joined where the skeleton joins two visible ones."""
    visible = [len(p) < 3 or p[2] > 0 for p in points]
    for a, b in skeleton:
        if a < len(points) and b < len(points) and visible[a] and visible[b]:
            draw.line(
                (
                    float(points[a][0]),
                    float(points[a][1]),
                    float(points[b][0]),
                    float(points[b][1]),
                ),
                fill=colour,
                width=2,
            )
    for point, shown in zip(points, visible, strict=True):
        if shown:
            x, y = float(point[0]), float(point[1])
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour, outline=(255, 255, 255))


#: The side, in pixels, of each panel of a detection's row of head outputs.
HEAD_PANEL = 112


def heads_picture(
    rows: Sequence[tuple[str, Image.Image, Sequence[tuple[str, npt.NDArray[np.float32]]]]],
    *,
    title: str = "",
    notes: Sequence[str] = (),
) -> Image.Image:
    """One row per detection: its crop of the picture, then each head output as a heat map
    (min-max scaled, viridis), every panel ``HEAD_PANEL`` pixels square under its label.

    Args:
        rows: ``(label, crop, [(panel label, (h, w) map), ...])`` per detection.
        title: The first line above the rows.
        notes: Further lines.
    """
    face = font(CAPTION_SIZE)
    text_h = line_height(CAPTION_SIZE) + 2
    lut = colormap_lut("viridis", 256)
    columns = 1 + max((len(heats) for _, _, heats in rows), default=0)
    cell_w, cell_h = HEAD_PANEL + PAD, HEAD_PANEL + text_h + PAD
    lines = [line for line in (title, *notes) if line]
    head_h = PAD + len(lines) * (text_h + 2) if lines else 0
    text_w = max((int(face.getlength(line)) for line in lines), default=0) + 2 * PAD
    width = max(PAD + columns * cell_w, text_w)
    canvas = Image.new("RGB", (width, head_h + len(rows) * cell_h + PAD), BACKGROUND_RGB)
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        draw.text(
            (PAD, PAD + i * (text_h + 2)),
            line,
            font=face,
            fill=TEXT_RGB if i == 0 else MUTED_RGB,
        )
    for r, (label, crop, heats) in enumerate(rows):
        y = head_h + PAD + r * cell_h
        panels = [(label, crop.convert("RGB").resize((HEAD_PANEL, HEAD_PANEL)))]
        for name, heat in heats:
            values = np.nan_to_num(np.asarray(heat, dtype=np.float32))
            low, high = float(values.min()), float(values.max())
            scaled = (values - low) / (high - low) if high > low else np.zeros_like(values)
            coloured = lut[np.clip(np.rint(scaled * 255), 0, 255).astype(np.uint8)]
            picture = Image.fromarray(coloured).resize(
                (HEAD_PANEL, HEAD_PANEL), Image.Resampling.NEAREST
            )
            panels.append((name, picture))
        for c, (name, picture) in enumerate(panels):
            x = PAD + c * cell_w
            draw.text((x, y), _clipped(name, face, HEAD_PANEL), font=face, fill=TEXT_RGB)
            canvas.paste(picture, (x, y + text_h))
    return canvas


def _clipped(text: str, face: object, width: int) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels."""
    length = getattr(face, "getlength", None)
    if length is None or length(text) <= width:
        return text
    while text and length(text + "…") > width:
        text = text[:-1]
    return text + "…"
