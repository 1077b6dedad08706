"""The class map of a segmentation model: every pixel of the model input coloured by the class
it scores highest, with a legend of the classes present.

torchvision's segmentation models upsample their head's logits bilinearly to the input size
(``align_corners=False``) and take the argmax per pixel; this does the same from the captured
head output, so the picture is the model's own prediction. Each class has its own colour; the
background class is left uncoloured.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from actviz.render.legend import font
from actviz.render.theme import BACKGROUND_RGB, CAPTION_SIZE, MUTED_RGB, PAD, TEXT_RGB

__all__ = ["class_map", "class_palette", "segmentation_picture"]

U8Array = npt.NDArray[np.uint8]

_ROW = 18
_SWATCH = 12
_ALPHA = 0.55
#: Legend rows per column at most, before the legend wraps into another column.
_MIN_ROWS = 8


@functools.lru_cache(maxsize=1)
def class_palette() -> U8Array:
    """``(60, 3)`` RGB class colours: matplotlib's ``tab20``, ``tab20b`` and ``tab20c``,
    distinct and bright enough to read through a blend; class ``i`` takes colour ``i % 60``."""
    import matplotlib

    colours = [
        matplotlib.colormaps[name](i / 20 + 1 / 40)[:3]
        for name in ("tab20", "tab20b", "tab20c")
        for i in range(20)
    ]
    palette: U8Array = np.clip(np.rint(np.asarray(colours) * 255), 0, 255).astype(np.uint8)
    palette.setflags(write=False)
    return palette


def class_map(logits: npt.ArrayLike, size: tuple[int, int]) -> npt.NDArray[np.int64]:
    """The argmax class of every pixel, after upsampling ``(C, h, w)`` logits to
    ``size = (W, H)`` as the models do (bilinear, ``align_corners=False``).

    Raises:
        ValueError: If ``logits`` is not a non-empty ``(C, h, w)`` array.
    """
    import torch
    from torch.nn import functional as F

    array = np.asarray(logits, dtype=np.float32)
    if array.ndim != 3 or 0 in array.shape:
        raise ValueError(f"logits must be a non-empty (C, h, w) array, got shape {array.shape}")
    tensor = torch.from_numpy(np.nan_to_num(array, nan=-np.inf))[None]
    width, height = size
    if tensor.shape[-2:] != (height, width):
        tensor = F.interpolate(tensor, size=(height, width), mode="bilinear", align_corners=False)
    classes: npt.NDArray[np.int64] = tensor[0].argmax(dim=0).numpy().astype(np.int64)
    return classes


def segmentation_picture(
    view: Image.Image,
    logits: npt.ArrayLike,
    names: Sequence[str] | None = None,
    *,
    title: str = "",
    notes: Sequence[str] = (),
) -> Image.Image:
    """The model input with each pixel coloured by its argmax class, and a legend.

    Args:
        view: What the model saw (the de-normalized input), ``W x H``.
        logits: ``(C, h, w)`` class logits of one image: the segmentation head's output.
        names: The name of each class; ``class N`` where missing. A first class whose name
            starts with ``__`` (``__background__``) is left uncoloured.
        title: A line above the picture.
        notes: Further lines under the title (random weights, ...).

    Returns:
        An RGB picture: title lines, then the coloured view beside a legend of the classes
        present, largest share first, each with its share of the pixels.
    """
    rgb = view.convert("RGB")
    classes = class_map(logits, rgb.size)
    count = np.asarray(logits).shape[0]
    labels = [
        str(names[i]) if names is not None and i < len(names) else f"class {i}"
        for i in range(count)
    ]
    background = 0 if labels and labels[0].startswith("__") else None
    palette = class_palette()
    colours = palette[classes % len(palette)].astype(np.float32)
    base = np.asarray(rgb, dtype=np.float32)
    mixed = (1.0 - _ALPHA) * base + _ALPHA * colours
    if background is not None:
        mixed[classes == background] = base[classes == background]
    coloured = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)

    present, pixels = np.unique(classes, return_counts=True)
    ranked = sorted(zip(present.tolist(), pixels.tolist(), strict=True), key=lambda p: -p[1])
    total = float(classes.size)
    rows = [
        (index, f"{labels[index]}  {_share(n / total)}", index == background) for index, n in ranked
    ]
    return _compose(Image.fromarray(coloured), rows, [title, *notes] if title else list(notes))


def _compose(
    picture: Image.Image, rows: list[tuple[int, str, bool]], lines: list[str]
) -> Image.Image:
    """Title lines on top; the picture on the left; legend columns on the right."""
    face = font(CAPTION_SIZE)
    width, height = picture.size
    per_column = max(_MIN_ROWS, (height - PAD) // _ROW)
    columns = [rows[i : i + per_column] for i in range(0, len(rows), per_column)] or [[]]
    column_widths = [
        _SWATCH + PAD + max((int(face.getlength(text)) for _, text, _ in column), default=0)
        for column in columns
    ]
    legend_w = sum(column_widths) + PAD * (len(columns) + 1)
    legend_h = PAD + max(len(c) for c in columns) * _ROW
    head_h = PAD + len(lines) * _ROW if lines else 0
    text_w = max((int(face.getlength(line)) for line in lines), default=0) + 2 * PAD
    canvas_w = max(width + legend_w, text_w)
    canvas = Image.new("RGB", (canvas_w, head_h + max(height, legend_h)), BACKGROUND_RGB)
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        colour = TEXT_RGB if i == 0 else MUTED_RGB
        draw.text((PAD, PAD + i * _ROW), line, font=face, fill=colour)
    canvas.paste(picture, (0, head_h))
    palette = class_palette()
    x = width + PAD
    for column, column_w in zip(columns, column_widths, strict=True):
        y = head_h + PAD
        for index, text, uncoloured in column:
            box = (x, y + 2, x + _SWATCH - 1, y + 2 + _SWATCH - 1)
            if uncoloured:  # the background keeps the photo's colours: an outlined swatch
                draw.rectangle(box, outline=MUTED_RGB)
            else:
                colour = palette[index % len(palette)]
                draw.rectangle(box, fill=(int(colour[0]), int(colour[1]), int(colour[2])))
            draw.text((x + _SWATCH + PAD, y), text, font=face, fill=TEXT_RGB)
            y += _ROW
        x += column_w + PAD
    return canvas


def _share(value: float) -> str:
    percent = value * 100
    return f"{percent:.1f}%" if percent >= 0.1 else "<0.1%"
