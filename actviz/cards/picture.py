"""A picture a cell shows as itself: PNG bytes with a caption (``_repr_png_``)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from actviz.cards.card import clip_text
from actviz.cards.thumbs import data_uri

__all__ = ["Picture", "picture_of", "rgb_png", "side_by_side"]


def rgb_png(rgb: Any) -> bytes:
    """An ``(H, W, 3)`` (or ``(H, W)``) uint8 array as PNG bytes."""

    from actviz.render.png import encode_png

    return encode_png(np.ascontiguousarray(rgb, dtype=np.uint8), level=6, row_filter="up")


def side_by_side(images: Any, limit: int = 8, gap: int = 4) -> bytes:
    """The first ``limit`` ``(H, W, 3)`` uint8 images as high as the first, side by side on
    white, as PNG bytes: what a cell shows of a list of pictures."""

    chosen = [np.asarray(image, dtype=np.uint8) for image in list(images)[:limit]]
    if not chosen:
        return rgb_png(np.zeros((1, 1, 3), np.uint8))
    height = chosen[0].shape[0]
    space = np.full((height, gap, 3), 255, np.uint8)
    parts: list[Any] = []
    for image in chosen:
        if image.shape[0] == height and image.ndim == 3:
            parts += [space, image] if parts else [image]
    return rgb_png(np.concatenate(parts, axis=1))


@dataclass(frozen=True)
class Picture:
    """One picture drawn in memory: its PNG bytes and what it shows.

    Attributes:
        png: The PNG bytes, as the command line writes them.
        label: What it shows (the layer and the kind).
        size: ``(width, height)`` in pixels.
    """

    png: bytes
    label: str
    size: tuple[int, int]

    def _repr_png_(self) -> bytes:
        return self.png

    def __repr__(self) -> str:
        return f"Picture({clip_text(self.label, 120)!r}, {self.size[0]}x{self.size[1]})"

    def data_uri(self) -> str:
        """The picture as a ``data:image/png;base64`` URI."""
        return data_uri(self.png)

    def to_pil(self) -> Any:
        """The picture as a Pillow image."""

        image = Image.open(io.BytesIO(self.png))
        image.load()
        return image


def picture_of(png: bytes, label: str) -> Picture:
    """A :class:`Picture` of PNG bytes (its size read from the IHDR chunk)."""
    width = int.from_bytes(png[16:20], "big")
    height = int.from_bytes(png[20:24], "big")
    return Picture(png, label, (width, height))
