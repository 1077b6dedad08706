"""The 8-bit palette pictures actviz draws: palette layout, colormap tables, GridImage.

Every picture is a ``(H, W)`` array of palette indices plus a 256-entry RGB palette, ready to
be written as a mode ``"P"`` PNG. Palette layout:

* ``0 .. N_LEVELS - 1``: the colormap sampled at ``N_LEVELS`` evenly spaced levels.
  ``N_LEVELS`` is odd, so ``CENTER_LEVEL`` is the exact middle of a diverging map and a
  value of 0 in a signed picture is drawn in its centre colour.
* ``BACKGROUND``: dark grey, used for gaps, padding and the header background.
* ``TEXT``: near-white, used for header text only.
* ``NONFINITE``: magenta, for NaN and infinite values.
* ``SPARE``: unused (black).
* ``LABEL``: light grey, for the channel index above each tile.

Colormap tables and palettes are cached. The default colormaps' colours are kept in
:mod:`actviz.render.colormaps`, so drawing with them does not import matplotlib; any other
comes from ``matplotlib.colormaps`` (never ``matplotlib.pyplot``).
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render.colormaps import TABLES
from actviz.render.theme import BACKGROUND_RGB, LABEL_RGB, NONFINITE_RGB, TEXT_RGB

__all__ = [
    "BACKGROUND",
    "CENTER_LEVEL",
    "LABEL",
    "N_LEVELS",
    "NONFINITE",
    "SPARE",
    "TEXT",
    "GridImage",
    "U8Array",
    "choose_cmap",
    "colormap_lut",
    "palette_for",
]

N_LEVELS = 251
"""Number of colormap levels; palette indices ``0 .. N_LEVELS - 1``."""
CENTER_LEVEL = N_LEVELS // 2
"""The level a value of 0 maps to in a signed (centred) picture."""
BACKGROUND = N_LEVELS
"""Palette index of gaps, padding and the header background (dark grey)."""
TEXT = N_LEVELS + 1
"""Palette index of header text (near-white)."""
NONFINITE = N_LEVELS + 2
"""Palette index of NaN and infinite values (magenta)."""
SPARE = N_LEVELS + 3
"""Palette index kept free (black)."""
LABEL = N_LEVELS + 4
"""Palette index of the channel labels above tiles (light grey): text in the picture's body
that is told apart from the header's ``TEXT``."""

_SPARE_RGB = (0, 0, 0)

_DEFAULT_CMAP = "viridis"
_DEFAULT_SIGNED_CMAP = "RdBu_r"
# Diverging maps: an explicitly chosen one is centred on 0 when the data is signed.
_DIVERGING = frozenset(
    {
        "BrBG",
        "PRGn",
        "PiYG",
        "PuOr",
        "RdBu",
        "RdGy",
        "RdYlBu",
        "RdYlGn",
        "Spectral",
        "berlin",
        "bwr",
        "coolwarm",
        "managua",
        "seismic",
        "vanimo",
    }
)
_COMMON_CMAPS = ("viridis", "magma", "inferno", "plasma", "cividis", "gray", "RdBu_r", "coolwarm")

U8Array = npt.NDArray[np.uint8]


@dataclass(frozen=True, eq=False)
class GridImage:
    """A rendered picture: palette indices, the palette, and what the picture shows.

    Attributes:
        indices: ``(H, W)`` uint8 palette indices of the whole picture, header included.
        palette: ``(256, 3)`` uint8 RGB palette.
        channels_shown: Number of channels (or vector values) drawn.
        channels_total: Number of channels (or vector values) in the input.
        channel_ids: The channels drawn, in display order.
        vmin: Low end of the values actually mapped to colours (after clipping and
            centring). For per-channel normalisation, the lowest of the shown channels'
            low ends. Always finite.
        vmax: High end, likewise.
        cmap: Name of the colormap used.
        signed: True when a diverging map centred on 0 was used.
        norm: ``"channel"``, ``"layer"`` or ``"shared"`` (a fixed ``value_range``).
        header_height: Height in pixels of the header band at the top.
        tile_shape: ``(height, width)`` in pixels of one tile (one cell for vectors).
        grid_shape: ``(rows, columns)`` of the tile layout.
        upscale: Integer nearest-neighbour upscaling factor applied to each map.
        label_height: Pixels of the channel-index band above each tile (0: none).
        pitch: ``(rows, columns)`` pixels from one tile to the next, gap and label included;
            ``(0, 0)`` when unknown.
    """

    indices: U8Array
    palette: U8Array
    channels_shown: int
    channels_total: int
    channel_ids: tuple[int, ...]
    vmin: float
    vmax: float
    cmap: str
    signed: bool
    norm: str
    header_height: int = 0
    tile_shape: tuple[int, int] = (0, 0)
    grid_shape: tuple[int, int] = (0, 0)
    upscale: int = 1
    label_height: int = 0
    pitch: tuple[int, int] = (0, 0)

    @property
    def size(self) -> tuple[int, int]:
        """The picture's ``(width, height)`` in pixels, as Pillow orders it."""
        return int(self.indices.shape[1]), int(self.indices.shape[0])

    def to_rgb(self) -> U8Array:
        """Return the picture as an ``(H, W, 3)`` uint8 RGB array (palette lookup)."""
        rgb: U8Array = self.palette[self.indices]
        return rgb

    def to_png(self, level: int = 1) -> bytes:
        """Return the picture as palette PNG bytes, encoded straight from ``indices``."""
        from actviz.render.png import encode_png

        return encode_png(self.indices, palette=self.palette, level=level)

    def _repr_png_(self) -> bytes:
        return self.to_png(6)

    def to_pil(self) -> Image.Image:
        """Return the picture as a mode ``"P"`` Pillow image with the palette attached."""
        height, width = self.indices.shape
        image = Image.frombytes("P", (int(width), int(height)), self.indices.tobytes())
        image.putpalette(self.palette.tobytes(), rawmode="RGB")
        return image


# --------------------------------------------------------------------------- colormaps


@functools.lru_cache(maxsize=64)
def colormap_lut(name: str, levels: int = N_LEVELS) -> U8Array:
    """Sample a matplotlib colormap at evenly spaced levels.

    Args:
        name: A colormap name registered with matplotlib (e.g. ``"viridis"``, ``"RdBu_r"``).
        levels: Number of levels, 2 to 256.

    Returns:
        A read-only ``(levels, 3)`` uint8 RGB table; level 0 is the low end of the map.

    Raises:
        ValueError: The name is not a known colormap, or ``levels`` is out of range.
    """

    known = isinstance(name, str) and name in TABLES
    if not known:
        import matplotlib

        if not isinstance(name, str) or name not in matplotlib.colormaps:
            raise ValueError(_unknown_cmap_message(name))
    if not 2 <= levels <= 256:
        raise ValueError(f"levels must be between 2 and 256, got {levels}")
    if known:
        # As matplotlib samples its 256 colours: level x goes to colour floor(256 x), 1.0 to
        # the last, so the table gives the same bytes as the colormap itself.
        table = np.frombuffer(bytes.fromhex(TABLES[name]), dtype=np.uint8).reshape(256, 3)
        index = np.linspace(0.0, 1.0, levels) * 256
        index[index == 256] = 255
        lut: U8Array = table[index.astype(int)].copy()
    else:
        import matplotlib

        colormap = matplotlib.colormaps[name]
        rgba = np.asarray(colormap(np.linspace(0.0, 1.0, levels)), dtype=np.float64)
        lut = np.clip(np.rint(rgba[:, :3] * 255.0), 0, 255).astype(np.uint8)
    lut.setflags(write=False)
    return lut


def _unknown_cmap_message(name: object) -> str:
    import matplotlib

    names = list(matplotlib.colormaps)
    close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
    if close:
        hint = "did you mean " + ", ".join(close) + "?"
    else:
        hint = "try one of " + ", ".join(c for c in _COMMON_CMAPS if c in names)
    return f"unknown colormap {name!r}; {hint} ({len(names)} names in matplotlib.colormaps)"


@functools.lru_cache(maxsize=64)
def palette_for(name: str) -> U8Array:
    """The read-only ``(256, 3)`` palette of a picture drawn with colormap ``name``."""
    palette = np.zeros((256, 3), dtype=np.uint8)
    palette[:N_LEVELS] = colormap_lut(name, N_LEVELS)
    palette[BACKGROUND] = BACKGROUND_RGB
    palette[TEXT] = TEXT_RGB
    palette[NONFINITE] = NONFINITE_RGB
    palette[SPARE] = _SPARE_RGB
    palette[LABEL] = LABEL_RGB
    palette.setflags(write=False)
    return palette


def _is_diverging(name: str) -> bool:
    return name.removesuffix("_r") in _DIVERGING


def choose_cmap(cmap: str | None, signed_data: bool) -> tuple[str, bool]:
    """The colormap to use, and whether it is centred on 0."""
    if cmap is None:
        return (_DEFAULT_SIGNED_CMAP if signed_data else _DEFAULT_CMAP), signed_data
    return cmap, signed_data and _is_diverging(cmap)
