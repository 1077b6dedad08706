"""PNG encoding of 8-bit pictures (palette, grey, RGB) from numpy arrays.

Deflating the pixels is most of the cost of writing a picture. At levels 1-3 the pixels are
deflated by ISA-L (the ``isal`` package, a dependency) when it imports: on actviz's grids its
level 1 is about six times faster than zlib's level 1 (which Pillow's encoder uses) for files
about 13 % larger, and like zlib it releases the GIL, so the render threads encode in
parallel. zlib deflates at level 0 (stored), at 4-9 (smaller files on request) and wherever
ISA-L is missing. The PNG itself is a few chunks around the deflated rows, written here.

A picture may also be joined from bands of rows deflated on their own (:func:`deflate_band`,
:func:`join_bands`): rows that many pictures share (a header, a photo) are deflated once.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "Band",
    "Bands",
    "deflate",
    "deflate_band",
    "deflate_bands",
    "encode_png",
    "join_bands",
    "picture_png",
]

U8 = npt.NDArray[np.uint8]
Filter = Literal["none", "up"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _isal() -> Any:
    try:
        from isal import isal_zlib
    except ImportError:  # no wheel for this platform: zlib does it, slower
        return None
    return isal_zlib


_ISAL = _isal()
# ISA-L's checksums, where it imports: about 5x (Adler-32) and 20x (CRC-32) zlib's on a
# picture's rows, the same numbers. Both read bytes or arrays in place (Any: numpy's stubs
# do not say arrays are buffers).
_adler32: Callable[[Any], int] = zlib.adler32 if _ISAL is None else _ISAL.adler32
_crc32: Callable[[bytes, int], int] = zlib.crc32 if _ISAL is None else _ISAL.crc32


def _deflater(level: int) -> Any:
    """The module that deflates at ``level`` (see the module's note)."""
    return _ISAL if _ISAL is not None and 1 <= level <= 3 else zlib


def deflate(data: bytes | U8, level: int) -> bytes:
    """A zlib stream of ``data`` (bytes, or a contiguous array read in place) at ``level``
    0-9 (see the module's note on who deflates)."""
    compressed: bytes = _deflater(level).compress(data, level)
    return compressed


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
    data = _filtered(pixels[None], "none" if colour_type == 3 else row_filter)
    chunks = [_header(width, height, colour_type)]
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
    chunks.append(_chunk(b"IDAT", deflate(data, level)))
    chunks.append(_chunk(b"IEND", b""))
    return _SIGNATURE + b"".join(chunks)


@dataclass(frozen=True)
class Band:
    """Consecutive rows of a picture, filtered and deflated on their own (the first row
    unfiltered, the deflate stream ended by a full flush), so that bands join into one PNG
    in any order (:func:`join_bands`): a band that many pictures share, a header or a photo,
    is deflated once.

    Attributes:
        deflated: The raw deflate stream, byte-aligned, referring to nothing before it.
        adler: The Adler-32 checksum of the filtered rows.
        size: How many bytes the filtered rows are.
        width: Pixels a row.
        height: Rows.
        colour_type: The PNG colour type: 0 grey, 2 RGB.
    """

    deflated: bytes
    adler: int
    size: int
    width: int
    height: int
    colour_type: int


def deflate_band(pixels: U8, *, level: int = 1, row_filter: Filter = "none") -> Band:
    """Rows of grey levels ``(H, W)`` or RGB ``(H, W, 3)`` as a :class:`Band`."""
    bad = pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or 0 in pixels.shape[:2]
    if bad or (pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(
            f"expected (H, W) or (H, W, 3) uint8 pixels, got {pixels.dtype} {pixels.shape}"
        )
    return deflate_bands(pixels[None], level=level, row_filter=row_filter)[0]


def deflate_bands(pixels: U8, *, level: int = 1, row_filter: Filter = "none") -> list[Band]:
    """Bands of the same size, ``(B, H, W)`` grey or ``(B, H, W, 3)`` RGB, as one
    :class:`Band` each: filtered in one numpy pass for all of them, each deflated on its own
    (the same bands as :func:`deflate_band` makes one at a time)."""
    if pixels.dtype != np.uint8 or pixels.ndim not in (3, 4) or 0 in pixels.shape[1:3]:
        raise ValueError(
            f"expected (B, H, W) or (B, H, W, 3) uint8 pixels, got {pixels.dtype} {pixels.shape}"
        )
    if pixels.ndim == 4 and pixels.shape[3] != 3:
        raise ValueError(f"expected (B, H, W, 3) RGB pixels, got {pixels.shape}")
    height, width = pixels.shape[1:3]
    colour_type = 2 if pixels.ndim == 4 else 0
    module = _deflater(level)
    bands = []
    # Each band's rows are deflated and summed in place, not copied to bytes.
    for data in _filtered(pixels, row_filter):
        stream = module.compressobj(level, zlib.DEFLATED, -15)
        deflated = stream.compress(data) + stream.flush(module.Z_FULL_FLUSH)
        bands.append(Band(deflated, _adler32(data), data.nbytes, width, height, colour_type))
    return bands


def join_bands(bands: Sequence[Band]) -> bytes:
    """One PNG of bands of the same width and colour type, top to bottom, without deflating
    anything again: the zlib stream is their deflate streams one after another, ended by an
    empty final block, under the Adler-32 of all their rows (combined from theirs)."""
    if not bands:
        raise ValueError("a PNG has at least one band")
    first = bands[0]
    if any((b.width, b.colour_type) != (first.width, first.colour_type) for b in bands):
        raise ValueError("bands of one picture have the same width and colour type")
    adler = bands[0].adler
    for band in bands[1:]:
        adler = _adler32_combine(adler, band.adler, band.size)
    # zlib's header (deflate, 32 KiB window), the streams, a final empty stored block.
    stream = b"".join([b"\x78\x01", *(b.deflated for b in bands), b"\x01\x00\x00\xff\xff"])
    height = sum(b.height for b in bands)
    return b"".join(
        [
            _SIGNATURE,
            _header(first.width, height, first.colour_type),
            _chunk(b"IDAT", stream + struct.pack(">I", adler)),
            _chunk(b"IEND", b""),
        ]
    )


class Bands:
    """Deflated bands by key, each deflated once however many pictures share it.

    Render threads may share one: two of them asking for a missing key at once both deflate
    it, to the same band.

    Args:
        level: Compression level 0-9.
        row_filter: As :func:`encode_png`'s.
    """

    def __init__(self, *, level: int = 1, row_filter: Filter = "none") -> None:
        self.level = level
        self.row_filter: Filter = row_filter
        self._bands: dict[Hashable, Band] = {}

    def band(self, pixels: U8) -> Band:
        """``pixels`` deflated, not kept."""
        return deflate_band(pixels, level=self.level, row_filter=self.row_filter)

    def shared(self, key: Hashable, make: Callable[[], U8]) -> Band:
        """The band kept under ``key``; ``make()`` deflated and kept when there is none."""
        band = self._bands.get(key)
        if band is None:
            band = self._bands[key] = self.band(make())
        return band


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


def _filtered(pixels: U8, row_filter: Filter) -> U8:
    """The rows of ``(B, H, W)`` or ``(B, H, W, 3)`` pictures as PNG stores them, ``(B, H,
    bytes a row + 1)``: each after its filter-type byte (up: minus the row above it, one
    numpy subtraction for all the pictures; a first row has none above it)."""
    rows = np.ascontiguousarray(pixels).reshape(*pixels.shape[:2], -1)
    height = rows.shape[1]
    data = np.empty((rows.shape[0], height, rows.shape[2] + 1), dtype=np.uint8)
    if row_filter == "up" and height > 1:
        data[:, 0, 0], data[:, 1:, 0] = 0, 2
        data[:, 0, 1:] = rows[:, 0]
        np.subtract(rows[:, 1:], rows[:, :-1], out=data[:, 1:, 1:])
    else:
        data[:, :, 0] = 0
        data[:, :, 1:] = rows
    return data


def _adler32_combine(first: int, second: int, length: int) -> int:
    """The Adler-32 of two byte strings one after the other, from each one's and the second's
    length (zlib's ``adler32_combine``, which Python's zlib does not expose): the second's
    running sums each gain the first's byte sum."""
    base = 65521
    a1, b1 = first & 0xFFFF, first >> 16
    a2, b2 = second & 0xFFFF, second >> 16
    a = (a1 + a2 - 1) % base
    b = (b1 + b2 + length * (a1 - 1)) % base
    return (b << 16) | a


def _header(width: int, height: int, colour_type: int) -> bytes:
    return _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = _crc32(data, _crc32(kind, 0))
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
