"""A picture a cell shows as itself: PNG bytes with a caption (``_repr_png_``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actviz.notebook.card import clip_text
from actviz.notebook.thumbs import data_uri

__all__ = ["Picture", "picture_of", "rgb_png"]


def rgb_png(rgb: Any) -> bytes:
    """An ``(H, W, 3)`` (or ``(H, W)``) uint8 array as PNG bytes."""
    import numpy as np

    from actviz.render.png import encode_png

    return encode_png(np.ascontiguousarray(rgb, dtype=np.uint8), level=6, row_filter="up")


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
        import io

        from PIL import Image

        image = Image.open(io.BytesIO(self.png))
        image.load()
        return image


def picture_of(png: bytes, label: str) -> Picture:
    """A :class:`Picture` of PNG bytes (its size read from the IHDR chunk)."""
    width = int.from_bytes(png[16:20], "big")
    height = int.from_bytes(png[20:24], "big")
    return Picture(png, label, (width, height))
