"""Inline pictures: a file, PNG bytes or an RGB array as a small PNG data URI.

Pictures are made smaller (never larger) to fit a box of :data:`THUMB_BOX`, keeping their
shape; Pillow does it (no torch). A file that cannot be read gives no thumbnail, not an error:
a card shows what it can.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, UnidentifiedImageError
from PIL import Image as PILImage

from actviz.cards.card import Thumb

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["THUMB_BOX", "data_uri", "fit_size", "thumb_from_array", "thumb_from_file", "to_png"]

#: The largest ``(width, height)`` of a card's thumbnail.
THUMB_BOX = (240, 180)


def fit_size(width: int, height: int, box: tuple[int, int] = THUMB_BOX) -> tuple[int, int]:
    """``(width, height)`` scaled down (never up) to fit ``box``, shape kept."""
    scale = min(1.0, box[0] / max(width, 1), box[1] / max(height, 1))
    return max(1, round(width * scale)), max(1, round(height * scale))


def data_uri(png: bytes) -> str:
    """PNG bytes as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def to_png(image: Image.Image) -> bytes:
    """A Pillow image as PNG bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def _thumb(image: Image.Image, label: str, box: tuple[int, int]) -> Thumb:

    size = fit_size(image.width, image.height, box)
    if size != image.size:
        # Resampled, then back to 256 colours: a third of the bytes of an RGB thumbnail.
        image = image.convert("RGB").resize(size, PILImage.Resampling.LANCZOS)
        image = image.quantize(256, method=PILImage.Quantize.FASTOCTREE)
    return Thumb(label, data_uri(to_png(image)), size[0], size[1])


def thumb_from_file(path: Path | str, label: str, box: tuple[int, int] = THUMB_BOX) -> Thumb | None:
    """A thumbnail of a picture file; None when it cannot be read."""

    try:
        with Image.open(path) as image:
            image.load()
            return _thumb(image, label, box)
    except (OSError, UnidentifiedImageError, ValueError):
        return None


def thumb_from_array(rgb: Any, label: str, box: tuple[int, int] = THUMB_BOX) -> Thumb:
    """A thumbnail of an ``(H, W, 3)`` or ``(H, W)`` uint8 array."""

    return _thumb(Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)), label, box)
