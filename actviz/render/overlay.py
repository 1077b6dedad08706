"""Heat maps over the picture the model actually saw.

A class-activation map lives in the model-input frame: the centre crop that preprocessing cut
out of the resized photo. Blending it over the whole photo would shift it, so this module first
rebuilds that crop from the input tensor itself (:func:`input_view`) and
then blends the map over it. Everything here is pure: Pillow and numpy in, arrays out; nothing
is written and ``matplotlib.pyplot`` is never used.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

from actviz.render.legend import Header, font, new_canvas
from actviz.render.palette import palette_for
from actviz.render.theme import BACKGROUND_RGB, CAPTION_SIZE, TEXT_RGB
from actviz.render.theme import PANEL_GAP as PANEL_GAP  # with LABEL_HEIGHT, a panel's place

__all__ = [
    "MIN_VIEW",
    "blend",
    "cam_panel",
    "display_view",
    "headed",
    "input_view",
    "panel_row",
    "upsample",
]

U8Array = npt.NDArray[np.uint8]

LABEL_HEIGHT = 20
"""Pixels of the label strip above each panel of :func:`cam_panel`."""

MIN_VIEW = 160
"""Views smaller than this (a 28 x 28 digit model) are enlarged for the blended pictures."""


def input_view(x: npt.ArrayLike, mean: Sequence[float], std: Sequence[float]) -> Image.Image:
    """Undo the normalization of one model input and return it as an RGB image.

    This is the model-input frame itself, so a map blended over it cannot be misaligned.

    Args:
        x: ``(3, H, W)`` normalized input of one image (a CPU tensor's ``.numpy()``).
        mean: The transform's per-channel mean.
        std: The transform's per-channel standard deviation.

    Returns:
        The ``W x H`` RGB image.

    Raises:
        ValueError: If ``x`` is not a ``(3, H, W)`` array.
    """
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 3 or array.shape[0] != 3:
        raise ValueError(f"x must be a (3, H, W) array, got shape {array.shape}")
    m = np.asarray(mean, dtype=np.float64).reshape(-1, 1, 1)
    s = np.asarray(std, dtype=np.float64).reshape(-1, 1, 1)
    pixels = np.clip(np.rint((array * s + m) * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(np.ascontiguousarray(pixels.transpose(1, 2, 0)))


def display_view(x: npt.ArrayLike, mean: Sequence[float], std: Sequence[float]) -> Image.Image:
    """What the model saw (:func:`input_view`; a greyscale model's one channel as grey),
    enlarged by a whole factor (nearest) when it is smaller than :data:`MIN_VIEW`.

    Raises:
        ValueError: If ``x`` is not a ``(3, H, W)`` or ``(1, H, W)`` array.
    """
    array = np.asarray(x)
    mean, std = list(mean), list(std)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array.repeat(3, axis=0)
        mean, std = mean * 3 if len(mean) == 1 else mean, std * 3 if len(std) == 1 else std
    view = input_view(array, mean, std)
    factor = -(-MIN_VIEW // max(view.size))
    if factor > 1:
        view = view.resize((view.width * factor, view.height * factor), Image.Resampling.NEAREST)
    return view


def headed(pixels: U8Array, header: Header, cmap: str) -> Image.Image:
    """An RGB picture under a header whose colour bar shows ``cmap``."""
    height, width = pixels.shape[:2]
    canvas, top = new_canvas(height, width, header)
    rgb = palette_for(cmap)[canvas]
    rgb[top:, :width] = pixels
    return Image.fromarray(rgb)


def blend(
    view: Image.Image,
    heat: npt.ArrayLike,
    *,
    cmap: str = "jet",
    alpha: float = 0.5,
) -> U8Array:
    """Colour a heat map and blend it over a view of the model input.

    The map is stretched over the whole view with bilinear interpolation that treats each
    map cell as covering an equal block of the view (cell centres land on block centres),
    which is how a convolutional feature map relates to its input.

    Args:
        view: The model-input frame, e.g. from :func:`input_view`.
        heat: ``(h, w)`` values in ``[0, 1]``; values outside are clipped, NaN counts as 0.
        cmap: A matplotlib colormap name (``"jet"``, ``"inferno"``, ...).
        alpha: Weight of the heat colours, 0 (photo only) to 1 (colours only).

    Returns:
        ``(H, W, 3)`` uint8 RGB array the size of ``view``.

    Raises:
        ValueError: For a heat map that is not 2-D, an unknown colormap or alpha outside
            ``[0, 1]``.
    """
    import matplotlib

    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if cmap not in matplotlib.colormaps:
        raise ValueError(f"unknown colormap {cmap!r}; try jet, inferno, turbo or viridis")
    colours = matplotlib.colormaps[cmap](upsample(heat, view.size), bytes=True)[..., :3]
    base = np.asarray(view.convert("RGB"), dtype=np.float32)
    mixed = (1.0 - alpha) * base + alpha * colours.astype(np.float32)
    out: U8Array = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
    return out


def upsample(heat: npt.ArrayLike, size: tuple[int, int]) -> npt.NDArray[np.float32]:
    """Bilinear upsampling of a ``(h, w)`` map in ``[0, 1]`` to ``size`` = ``(W, H)``.

    Raises:
        ValueError: If ``heat`` is not a non-empty 2-D array.
    """
    array = np.asarray(heat, dtype=np.float32)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"heat must be a non-empty (h, w) array, got shape {array.shape}")
    array = np.clip(np.nan_to_num(array, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    image = Image.fromarray(np.ascontiguousarray(array))  # mode "F"
    if image.size != tuple(size):
        image = image.resize(size, Image.Resampling.BILINEAR)
    # Bilinear weights are convex, so the result stays in [0, 1] up to rounding.
    up: npt.NDArray[np.float32] = np.clip(np.asarray(image, dtype=np.float32), 0.0, 1.0)
    return up


def cam_panel(
    view: Image.Image,
    cams: Sequence[tuple[str, npt.ArrayLike]],
    *,
    cmap: str = "jet",
    alpha: float = 0.5,
    include_view: bool = True,
) -> U8Array:
    """Several heat maps over the same view, side by side, each under its own label.

    Args:
        view: The model-input frame.
        cams: ``(label, heat)`` pairs, e.g. ``("tabby 0.42", cam)`` for each of the top
            classes; each heat map is ``(h, w)`` in ``[0, 1]``.
        cmap: Colormap of the heat maps.
        alpha: Weight of the heat colours.
        include_view: Put the plain view first, labelled ``input``.

    Returns:
        ``(LABEL_HEIGHT + H, n * W + (n - 1) * PANEL_GAP, 3)`` uint8 RGB array.

    Raises:
        ValueError: If ``cams`` is empty, or as :func:`blend`.
    """
    if not cams:
        raise ValueError("cams must hold at least one (label, heat) pair")
    panels: list[tuple[str, U8Array]] = []
    if include_view:
        panels.append(("input", np.asarray(view.convert("RGB"), dtype=np.uint8)))
    panels += [(label, blend(view, heat, cmap=cmap, alpha=alpha)) for label, heat in cams]
    return panel_row(panels)


def panel_row(panels: Sequence[tuple[str, U8Array]]) -> U8Array:
    """Pictures of one size side by side, each under its own label.

    Args:
        panels: ``(label, (H, W, 3) uint8 pixels)`` pairs, all of the same size.

    Returns:
        ``(LABEL_HEIGHT + H, n * W + (n - 1) * PANEL_GAP, 3)`` uint8 RGB array.

    Raises:
        ValueError: If ``panels`` is empty.
    """
    if not panels:
        raise ValueError("panels must hold at least one (label, pixels) pair")
    height, width = panels[0][1].shape[:2]
    total_w = len(panels) * width + (len(panels) - 1) * PANEL_GAP
    canvas = Image.new("RGB", (total_w, LABEL_HEIGHT + height), BACKGROUND_RGB)
    draw = ImageDraw.Draw(canvas)
    face = font(CAPTION_SIZE)
    for i, (label, pixels) in enumerate(panels):
        x = i * (width + PANEL_GAP)
        canvas.paste(Image.fromarray(pixels), (x, LABEL_HEIGHT))
        text = _fit(label, width - 6, face)
        draw.text((x + 3, (LABEL_HEIGHT - CAPTION_SIZE) // 2 - 1), text, font=face, fill=TEXT_RGB)
    out: U8Array = np.asarray(canvas, dtype=np.uint8)
    return out


def _fit(text: str, width: int, font: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> str:
    """Shorten ``text`` with an ellipsis until it fits in ``width`` pixels, keeping its tail
    from the last ``" ("`` (a class label's ``"(281) 42.0%"``) whole when that fits."""
    if font.getlength(text) <= width:
        return text
    cut = text.rfind(" (")
    head, tail = (text[:cut], text[cut:]) if cut > 0 else (text, "")
    if tail and font.getlength("…" + tail) > width:
        head, tail = text, ""
    while head and font.getlength(head + "…" + tail) > width:
        head = head[:-1]
    return head + "…" + tail
