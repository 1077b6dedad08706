"""PNG encoding of 8-bit pictures (palette, grey, RGB) from numpy arrays.

Deflating the pixels is most of the cost of writing a picture. At levels 1-3 the pixels are
deflated by ISA-L (the ``isal`` package, a dependency) when it imports: on actviz's grids its
level 1 is about six times faster than zlib's level 1 (which Pillow's encoder uses) for files
about 13 % larger, and like zlib it releases the GIL, so the render threads encode in
parallel. zlib deflates at level 0 (stored), at 4-9 (smaller files on request) and wherever
ISA-L is missing. The PNG itself is a few chunks around the deflated rows, written here.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["deflate", "encode_png", "picture_png"]

U8 = npt.NDArray[np.uint8]
Filter = Literal["none", "up"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _isal() -> Callable[[bytes, int], bytes] | None:
    try:
        from isal import isal_zlib
    except ImportError:  # no wheel for this platform: zlib does it, slower
        return None
    compress: Callable[[bytes, int], bytes] = isal_zlib.compress
    return compress


_ISAL = _isal()


def deflate(data: bytes, level: int) -> bytes:
    """A zlib stream of ``data`` at ``level`` 0-9 (see the module's note on who deflates)."""
    if _ISAL is not None and 1 <= level <= 3:
        return _ISAL(data, level)
    return zlib.compress(data, level)


def encode_png(
    pixels: U8,
    *,
    palette: U8 | None = None,
    level: int = 1,
    row_filter: Filter = "none",
) -> bytes:
    """An 8-bit picture as PNG bytes, lossless.

    Args:
        pixels: ``(H, W)`` palette indices (with ``palette``) or grey levels, or ``(H, W, 3)``
            RGB.
        palette: ``(N, 3)`` uint8 RGB entries, N <= 256, for a palette picture.
        level: Compression level 0-9.
        row_filter: ``"none"``, or ``"up"``: each row minus the one above it, one numpy
            subtraction for the whole picture; deflate then finds photographs' vertical
            smoothness. Palette indices are left unfiltered, as the PNG spec advises.
    """
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3):
        raise ValueError(
            f"expected (H, W) or (H, W, 3) uint8 pixels, got {pixels.dtype} {pixels.shape}"
        )
    height, width = pixels.shape[:2]
    if height == 0 or width == 0:
        raise ValueError(f"a PNG has at least one pixel, got shape {pixels.shape}")
    if pixels.ndim == 3:
        if pixels.shape[2] != 3 or palette is not None:
            raise ValueError(f"expected (H, W, 3) RGB pixels without a palette, got {pixels.shape}")
        colour_type = 2
    else:
        colour_type = 0 if palette is None else 3
    rows = np.ascontiguousarray(pixels).reshape(height, -1)
    data = np.empty((height, rows.shape[1] + 1), dtype=np.uint8)
    if row_filter == "up" and colour_type != 3 and height > 1:
        data[0, 0], data[1:, 0] = 0, 2  # the first row has nothing above it
        data[0, 1:] = rows[0]
        np.subtract(rows[1:], rows[:-1], out=data[1:, 1:])
    else:
        data[:, 0] = 0
        data[:, 1:] = rows
    chunks = [_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))]
    if palette is not None:
        if palette.dtype != np.uint8:
            raise ValueError(f"expected a uint8 palette, got {palette.dtype}")
        entries = np.ascontiguousarray(palette).reshape(-1, 3)
        if not 1 <= len(entries) <= 256:
            raise ValueError(f"a palette has 1 to 256 entries, got {len(entries)}")
        highest = int(pixels.max()) if len(entries) < 256 else 0
        if highest >= len(entries):  # indices past the palette: black, as decoders show them
            entries = np.concatenate([entries, np.zeros((highest + 1 - len(entries), 3), np.uint8)])
        chunks.append(_chunk(b"PLTE", entries.tobytes()))
    chunks.append(_chunk(b"IDAT", deflate(data.tobytes(), level)))
    chunks.append(_chunk(b"IEND", b""))
    return _SIGNATURE + b"".join(chunks)


def picture_png(image: Image.Image, level: int = 1) -> bytes:
    """A Pillow picture as PNG bytes. Palette, grey and RGB pictures are encoded by
    :func:`encode_png` (level 1, the default, is its fast end); others by Pillow (pictures
    with transparency or a colour profile among them)."""
    entries = image.getpalette() if image.mode == "P" else None
    plain = not image.has_transparency_data and "icc_profile" not in image.info
    if image.mode in ("P", "L", "RGB") and entries != [] and plain:
        palette = None if entries is None else np.array(entries, np.uint8).reshape(-1, 3)
        return encode_png(
            np.asarray(image),
            palette=palette,
            level=level,
            row_filter="up" if image.mode == "RGB" else "none",
        )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(data, zlib.crc32(kind))
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
