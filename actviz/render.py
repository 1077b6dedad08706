"""Rendering of one image's activations as an 8-bit palette picture.

The input is a plain numpy array, ``(C, H, W)`` for a feature map or ``(C,)`` for a vector
(pooled features, logits). The output is a :class:`GridImage`: a ``(H, W)`` array of palette
indices plus a 256-entry RGB palette, ready to be written as a mode ``"P"`` PNG.

Palette layout:

* ``0 .. N_LEVELS - 1``: the colormap sampled at ``N_LEVELS`` evenly spaced levels.
  ``N_LEVELS`` is odd, so ``CENTER_LEVEL`` is the exact middle of a diverging map and a
  value of 0 in a signed picture is drawn in its centre colour.
* ``BACKGROUND``: dark grey, used for gaps, padding and the header background.
* ``TEXT``: near-white, used for header text only.
* ``NONFINITE``: magenta, for NaN and infinite values.
* ``SPARE``: unused (black), as is index 255.

Everything is vectorised over channels; the header is drawn once per picture with Pillow,
and fonts, text glyph masks, colormap tables and palettes are cached. Nothing here writes
files or imports ``matplotlib.pyplot``.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import matplotlib
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "BACKGROUND",
    "CENTER_LEVEL",
    "GAP",
    "HEADER_MIN_WIDTH",
    "N_LEVELS",
    "NONFINITE",
    "SPARE",
    "TEXT",
    "GridImage",
    "Norm",
    "Order",
    "colormap_lut",
    "is_signed",
    "render_grid",
    "render_vector",
]

Norm = Literal["channel", "layer"]
Order = Literal["index", "mean", "max", "std"]

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

GAP = 2
"""Pixels of ``BACKGROUND`` between tiles and around the grid."""
HEADER_MIN_WIDTH = 420
"""The picture is never narrower than this, so the header always fits."""

_BACKGROUND_RGB = (38, 38, 38)
_TEXT_RGB = (235, 235, 235)
_NONFINITE_RGB = (255, 0, 255)
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

# Header layout (pixels).
_PAD_X = 6
_PAD_Y = 5
_TITLE_SIZE = 13
_INFO_SIZE = 12
_LABEL_SIZE = 11
_BAR_WIDTH = 160
_BAR_HEIGHT = 8

# render_vector layout (pixels).
_CELL = 11
_CELL_PITCH = 12
_ROW_LABEL_SIZE = 10

# Spans at or below this are treated as a constant map (also keeps 1/span finite in float32).
_TINY_SPAN = 1e-30
# Above this magnitude the mapping arithmetic is done in float64 to avoid float32 overflow.
_HUGE = 1e37

U8Array = npt.NDArray[np.uint8]
F32Array = npt.NDArray[np.float32]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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

    @property
    def size(self) -> tuple[int, int]:
        """The picture's ``(width, height)`` in pixels, as Pillow orders it."""
        return int(self.indices.shape[1]), int(self.indices.shape[0])

    def to_rgb(self) -> U8Array:
        """Return the picture as an ``(H, W, 3)`` uint8 RGB array (palette lookup)."""
        rgb: U8Array = self.palette[self.indices]
        return rgb

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
    if not isinstance(name, str) or name not in matplotlib.colormaps:
        raise ValueError(_unknown_cmap_message(name))
    if not 2 <= levels <= 256:
        raise ValueError(f"levels must be between 2 and 256, got {levels}")
    colormap = matplotlib.colormaps[name]
    rgba = np.asarray(colormap(np.linspace(0.0, 1.0, levels)), dtype=np.float64)
    lut = np.clip(np.rint(rgba[:, :3] * 255.0), 0, 255).astype(np.uint8)
    lut.setflags(write=False)
    return lut


def _unknown_cmap_message(name: object) -> str:
    names = list(matplotlib.colormaps)
    close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
    if close:
        hint = "did you mean " + ", ".join(close) + "?"
    else:
        hint = "try one of " + ", ".join(c for c in _COMMON_CMAPS if c in names)
    return f"unknown colormap {name!r}; {hint} ({len(names)} names in matplotlib.colormaps)"


@functools.lru_cache(maxsize=64)
def _palette(name: str) -> U8Array:
    palette = np.zeros((256, 3), dtype=np.uint8)
    palette[:N_LEVELS] = colormap_lut(name, N_LEVELS)
    palette[BACKGROUND] = _BACKGROUND_RGB
    palette[TEXT] = _TEXT_RGB
    palette[NONFINITE] = _NONFINITE_RGB
    palette[SPARE] = _SPARE_RGB
    palette.setflags(write=False)
    return palette


def _is_diverging(name: str) -> bool:
    return name.removesuffix("_r") in _DIVERGING


def _choose_cmap(cmap: str | None, signed_data: bool) -> tuple[str, bool]:
    """The colormap to use, and whether it is centred on 0."""
    if cmap is None:
        return (_DEFAULT_SIGNED_CMAP if signed_data else _DEFAULT_CMAP), signed_data
    return cmap, signed_data and _is_diverging(cmap)


# --------------------------------------------------------------------------- input checks


def _as_float32(data: npt.ArrayLike, what: str) -> F32Array:
    array = np.asarray(data)
    kind = array.dtype.kind
    if kind not in "biuf":
        raise ValueError(f"{what} must hold real numbers, got dtype {array.dtype}")
    if array.dtype != np.float32:
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf
            array = array.astype(np.float32)
    return array


def _range_is_signed(lo: float, hi: float) -> bool:
    """True when [lo, hi] has meaningful negative and positive parts."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    tolerance = 1e-6 * max(abs(lo), abs(hi))
    return lo < -tolerance and hi > tolerance


def is_signed(act: npt.ArrayLike) -> bool:
    """Tell whether data has meaningful negative and positive values.

    Only finite values count. Data is signed when its minimum is below ``-1e-6 * max|x|``
    and its maximum above ``+1e-6 * max|x|``, so float noise around 0 does not count.

    Args:
        act: Any real-valued array (NaN and infinities are ignored).

    Returns:
        True for signed data; False for non-negative, non-positive, empty or all-NaN data.
    """
    array = _as_float32(act, "act")
    if array.size == 0:
        return False
    finite = np.isfinite(array)
    lo = float(np.min(array, where=finite, initial=np.inf))
    hi = float(np.max(array, where=finite, initial=-np.inf))
    return _range_is_signed(lo, hi)


def _check_pair(value: object, name: str) -> tuple[float, float]:
    if not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (low, high), got {value!r}")
    try:
        lo, hi = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return lo, hi


def _check_value_range(value_range: object) -> tuple[float, float]:
    lo, hi = _check_pair(value_range, "value_range")
    if lo > hi:
        raise ValueError(f"value_range low must not exceed high, got {value_range!r}")
    return lo, hi


def _check_clip(clip: object) -> tuple[float, float]:
    lo, hi = _check_pair(clip, "clip")
    if not 0.0 <= lo < hi <= 100.0:
        raise ValueError(f"clip must be percentiles with 0 <= low < high <= 100, got {clip!r}")
    return lo, hi


def _check_choice(value: object, name: str, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


# --------------------------------------------------------------------------- statistics


def _channel_minmax(act: F32Array, finite: BoolArray | None) -> tuple[F64Array, F64Array]:
    """Per-channel finite min and max; ``+inf``/``-inf`` for channels with no finite value."""
    axes = tuple(range(1, act.ndim))
    if finite is None:
        lo = act.min(axis=axes)
        hi = act.max(axis=axes)
    else:
        lo = np.min(act, axis=axes, where=finite, initial=np.inf)
        hi = np.max(act, axis=axes, where=finite, initial=-np.inf)
    return lo.astype(np.float64), hi.astype(np.float64)


def _order_scores(
    act: F32Array, finite: BoolArray | None, order: str, channel_max: F64Array
) -> F64Array:
    """Per-channel sort keys (higher first); channels with no finite value get ``-inf``."""
    if order == "max":
        return channel_max
    axes = (1, 2)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if finite is None:
            if order == "mean":
                score = act.mean(axis=axes, dtype=np.float64)
            else:
                score = act.std(axis=axes, dtype=np.float64)
        else:
            count = finite.sum(axis=axes)
            zeroed = np.where(finite, act, np.float32(0)).astype(np.float64)
            mean = zeroed.sum(axis=axes) / np.maximum(count, 1)
            if order == "mean":
                score = mean
            else:
                deviation = np.where(finite, zeroed - mean[:, None, None], 0.0)
                score = np.sqrt(np.square(deviation).sum(axis=axes) / np.maximum(count, 1))
            score = np.where(count > 0, score, -np.inf)
    return np.where(np.isnan(score), -np.inf, score)


def _finite_row_percentiles(rows: F32Array, q: tuple[float, float]) -> F64Array:
    """``(k, 2)`` percentiles of rows holding only finite values (linear interpolation).

    Same results as ``np.percentile(rows, q, axis=1)``, faster: one partition at the two
    lower order statistics, then a min-reduction finds each next order statistic.
    """
    width = rows.shape[1]
    positions = [p / 100.0 * (width - 1) for p in q]
    lower = [math.floor(p) for p in positions]
    part = np.partition(rows, sorted(set(lower)), axis=1)
    out = np.empty((rows.shape[0], 2), dtype=np.float64)
    for j, (position, index) in enumerate(zip(positions, lower, strict=True)):
        below = part[:, index].astype(np.float64)
        fraction = position - index
        if fraction > 0 and index + 1 < width:
            # Everything right of a partition point is >= it: the next order statistic
            # is the smallest of those.
            above = part[:, index + 1 :].min(axis=1).astype(np.float64)
            below = below + (above - below) * fraction
        out[:, j] = below
    return out


def _sorted_row_percentiles(rows: F32Array, finite: BoolArray, q: tuple[float, float]) -> F64Array:
    """``(k, 2)`` percentiles of each row's finite values; 0 for rows with none."""
    ordered = np.where(finite, rows, np.float32(np.nan))
    ordered.sort(axis=1)  # NaN sorts last, so the finite values are the first `count`
    count = finite.sum(axis=1)
    last = np.maximum(count - 1, 0)[:, None]
    position = np.asarray(q, dtype=np.float64)[None, :] / 100.0 * last
    below = np.floor(position).astype(np.intp)
    above = np.minimum(below + 1, last)
    fraction = position - below
    v_below = np.take_along_axis(ordered, below, axis=1).astype(np.float64)
    v_above = np.take_along_axis(ordered, above, axis=1).astype(np.float64)
    values = v_below + (v_above - v_below) * fraction
    result: F64Array = np.where(count[:, None] > 0, values, 0.0)
    return result


def _row_percentiles(
    rows: F32Array, finite: BoolArray | None, q: tuple[float, float]
) -> tuple[F64Array, F64Array]:
    """Percentiles ``q`` of each row's finite values (linear interpolation); 0 for none."""
    if finite is None:
        both = _finite_row_percentiles(rows, q)
    else:
        clean = finite.all(axis=1)
        both = np.empty((rows.shape[0], 2), dtype=np.float64)
        if clean.any():
            both[clean] = _finite_row_percentiles(rows[clean], q)
        if not clean.all():
            both[~clean] = _sorted_row_percentiles(rows[~clean], finite[~clean], q)
    return both[:, 0], both[:, 1]


def _flat_percentiles(
    act: F32Array, finite: BoolArray | None, q: tuple[float, float]
) -> tuple[float, float]:
    values = act.reshape(1, -1) if finite is None else act[finite].reshape(1, -1)
    if values.size == 0:
        return 0.0, 0.0
    both = _finite_row_percentiles(values, q)
    return float(both[0, 0]), float(both[0, 1])


# --------------------------------------------------------------------------- mapping


def _map_levels(
    act: F32Array,
    lo: F64Array,
    hi: F64Array,
    constant: BoolArray,
    neutral: int,
    finite: BoolArray | None,
) -> U8Array:
    """Map each row ``act[i]`` linearly from ``[lo[i], hi[i]]`` to levels ``0 .. N_LEVELS-1``.

    Values outside the range are clamped; rows flagged ``constant`` (or with a degenerate
    range) are drawn at the ``neutral`` level; non-finite pixels become ``NONFINITE``.
    """
    span = hi - lo
    degenerate = constant | ~(span > _TINY_SPAN)
    safe_span = np.where(degenerate, 1.0, span)
    scale = np.where(degenerate, 0.0, (N_LEVELS - 1) / safe_span)
    base = np.where(degenerate, float(neutral), 0.0)
    lo = np.where(degenerate, 0.0, lo)

    extra = (1,) * (act.ndim - 1)
    huge = bool(np.max(np.abs(lo), initial=0.0) > _HUGE or np.max(span, initial=0.0) > _HUGE)
    dtype = np.float64 if huge else np.float32
    values = act if finite is None else np.where(finite, act, np.float32(0))
    with np.errstate(over="ignore", invalid="ignore"):
        levels = np.subtract(values, lo.astype(dtype).reshape(-1, *extra), dtype=dtype)
        levels *= scale.astype(dtype).reshape(-1, *extra)
        levels += base.astype(dtype).reshape(-1, *extra)
        # Round half to even: around the odd CENTER_LEVEL, +v and -v stay mirror images.
        np.rint(levels, out=levels)
        np.clip(levels, 0.0, N_LEVELS - 1, out=levels)
    indices: U8Array = levels.astype(np.uint8)
    if finite is not None:
        indices[~finite] = NONFINITE
    return indices


# --------------------------------------------------------------------------- text


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=8)
def _line_height(size: int) -> int:
    font = _font(size)
    if isinstance(font, ImageFont.FreeTypeFont):
        ascent, descent = font.getmetrics()
        return int(ascent + descent)
    return int(font.getbbox("Hg")[3]) + 1


@functools.lru_cache(maxsize=2048)
def _text_mask(text: str, size: int) -> BoolArray:
    """Boolean glyph mask of one line of text, ``_line_height(size)`` pixels tall."""
    font = _font(size)
    width = max(1, math.ceil(font.getbbox(text, mode="1")[2]) + 2)
    image = Image.new("L", (width, _line_height(size)), 0)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "1"  # crisp, hinted glyphs: no anti-aliasing to threshold away
    draw.text((0, 0), text, font=font, fill=255)
    mask = np.asarray(image) > 127
    mask.setflags(write=False)
    return mask


def _text_width(text: str, size: int) -> int:
    return int(_text_mask(text, size).shape[1])


def _paste_text(canvas: U8Array, text: str, size: int, x: int, y: int) -> None:
    if not text:
        return
    mask = _text_mask(text, size)
    height = min(mask.shape[0], canvas.shape[0] - y)
    width = min(mask.shape[1], canvas.shape[1] - x)
    if height <= 0 or width <= 0:
        return
    region = canvas[y : y + height, x : x + width]
    region[mask[:height, :width]] = TEXT


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3g}"


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class _Header:
    title: str
    info: str
    labels: tuple[str, ...]  # two (low, high) or three (low, centre, high)
    nonfinite: bool


@functools.lru_cache(maxsize=1)
def _header_rows() -> tuple[int, int, int, int, int]:
    """``(title_y, info_y, bar_y, label_y, height)`` of the header band."""
    title_y = _PAD_Y
    info_y = title_y + _line_height(_TITLE_SIZE) + 2
    bar_y = info_y + _line_height(_INFO_SIZE) + 4
    label_y = bar_y + _BAR_HEIGHT + 1
    height = label_y + _line_height(_LABEL_SIZE) + 3
    return title_y, info_y, bar_y, label_y, height


_NONFINITE_LEGEND = "NaN/Inf"


def _header_width(header: _Header) -> int:
    widths = [
        _text_width(header.title, _TITLE_SIZE),
        _text_width(header.info, _INFO_SIZE),
        _BAR_WIDTH + 20 + _BAR_HEIGHT + 4 + _text_width(_NONFINITE_LEGEND, _LABEL_SIZE),
    ]
    return max(widths) + 2 * _PAD_X


def _colour_bar() -> U8Array:
    levels = np.rint(np.linspace(0, N_LEVELS - 1, _BAR_WIDTH)).astype(np.uint8)
    return np.broadcast_to(levels, (_BAR_HEIGHT, _BAR_WIDTH))


def _draw_header(canvas: U8Array, header: _Header) -> None:
    title_y, info_y, bar_y, label_y, _ = _header_rows()
    _paste_text(canvas, header.title, _TITLE_SIZE, _PAD_X, title_y)
    _paste_text(canvas, header.info, _INFO_SIZE, _PAD_X, info_y)

    bar_x = _PAD_X
    canvas[bar_y : bar_y + _BAR_HEIGHT, bar_x : bar_x + _BAR_WIDTH] = _colour_bar()
    low, *middle, high = header.labels
    _paste_text(canvas, low, _LABEL_SIZE, bar_x, label_y)
    high_x = max(bar_x, bar_x + _BAR_WIDTH - _text_width(high, _LABEL_SIZE) + 2)
    _paste_text(canvas, high, _LABEL_SIZE, high_x, label_y)
    for centre in middle:
        centre_x = bar_x + _BAR_WIDTH // 2 - _text_width(centre, _LABEL_SIZE) // 2 + 1
        _paste_text(canvas, centre, _LABEL_SIZE, centre_x, label_y)

    if header.nonfinite:
        swatch_x = bar_x + _BAR_WIDTH + 20
        canvas[bar_y : bar_y + _BAR_HEIGHT, swatch_x : swatch_x + _BAR_HEIGHT] = NONFINITE
        legend_y = bar_y + _BAR_HEIGHT // 2 - _line_height(_LABEL_SIZE) // 2
        _paste_text(canvas, _NONFINITE_LEGEND, _LABEL_SIZE, swatch_x + _BAR_HEIGHT + 4, legend_y)


def _new_canvas(body_height: int, body_width: int, header: _Header) -> tuple[U8Array, int]:
    """A BACKGROUND canvas with the header drawn; returns it and the header height."""
    header_height = _header_rows()[4]
    width = max(body_width, HEADER_MIN_WIDTH, _header_width(header))
    canvas = np.full((header_height + body_height, width), BACKGROUND, dtype=np.uint8)
    _draw_header(canvas, header)
    return canvas, header_height


# --------------------------------------------------------------------------- layout


def _tile_grid(levels: U8Array, columns: int, upscale: int) -> U8Array:
    """Lay ``(k, h, w)`` tiles out row-major with GAP pixels between and around them."""
    count, height, width = levels.shape
    rows = -(-count // columns)
    tile_h, tile_w = height * upscale, width * upscale
    if upscale > 1:
        shape = (count, height, upscale, width, upscale)
        levels = np.broadcast_to(levels[:, :, None, :, None], shape).reshape(count, tile_h, tile_w)
    cells = np.full((rows * columns, tile_h + GAP, tile_w + GAP), BACKGROUND, dtype=np.uint8)
    cells[:count, :tile_h, :tile_w] = levels
    grid = cells.reshape(rows, columns, tile_h + GAP, tile_w + GAP).transpose(0, 2, 1, 3)
    body = np.full(
        (GAP + rows * (tile_h + GAP), GAP + columns * (tile_w + GAP)), BACKGROUND, np.uint8
    )
    body[GAP:, GAP:] = grid.reshape(rows * (tile_h + GAP), columns * (tile_w + GAP))
    return body


# --------------------------------------------------------------------------- public


def render_grid(
    act: npt.ArrayLike,
    *,
    title: str,
    max_channels: int = 64,
    order: Order = "index",
    norm: Norm = "channel",
    value_range: tuple[float, float] | None = None,
    clip: tuple[float, float] | None = None,
    cmap: str | None = None,
    min_tile: int = 32,
    columns: int | None = None,
) -> GridImage:
    """Draw a feature map as a grid of tiles, one per channel, under a header.

    Args:
        act: ``(C, H, W)`` real array for one image; ``(H, W)`` is treated as one channel.
            Integer and bool arrays are converted to float32.
        title: First header line, e.g. ``"layer1.0.conv1  Conv2d  (1, 64, 56, 56)"``.
        max_channels: Show at most this many channels; 0 or negative shows all.
        order: Which channels are shown when capped, and their order: ``"index"``, or by
            descending per-channel ``"mean"``, ``"max"`` or ``"std"`` of finite values.
        norm: ``"channel"`` maps each channel's own range to the colormap; ``"layer"``
            uses one range for the whole layer (all channels, shown or not).
        value_range: Fixed ``(low, high)`` for every channel; overrides ``norm`` and
            ``clip``, so several pictures can share one scale.
        clip: Percentiles ``(low, high)``, e.g. ``(1, 99)``: the range is taken between
            these percentiles, per channel or per layer according to ``norm``.
        cmap: Matplotlib colormap name. None picks ``"viridis"`` for non-negative data and
            ``"RdBu_r"`` centred on 0 for signed data. A named diverging map (``RdBu``,
            ``coolwarm``, ``bwr`` ...) is also centred on 0 when the data is signed.
        min_tile: Small maps are upscaled by an integer factor (nearest neighbour) until
            their longer side is at least this many pixels.
        columns: Tiles per row; None uses ``ceil(sqrt(k))``.

    Returns:
        The picture and a description of what it shows.

    Raises:
        ValueError: A malformed array, an unknown colormap, or an invalid option.

    Centred (signed) pictures map ``[-m, m]`` with ``m = max|x|``, so 0 is the centre
    colour. With per-channel normalisation a constant channel (max == min, e.g. all zero)
    is drawn at level 0, or at the centre level when centred. NaN and infinite pixels are
    drawn in ``NONFINITE`` and ignored when computing ranges and sort keys.
    """
    array = _as_float32(act, "act")
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3:
        raise ValueError(
            f"act must be a (C, H, W) or (H, W) array for one image, got shape {array.shape}"
        )
    if 0 in array.shape:
        raise ValueError(f"act must not be empty, got shape {array.shape}")
    _check_choice(order, "order", get_args(Order))
    _check_choice(norm, "norm", get_args(Norm))
    shared = _check_value_range(value_range) if value_range is not None else None
    percentiles = _check_clip(clip) if clip is not None and shared is None else None
    if min_tile < 0:
        raise ValueError(f"min_tile must be >= 0, got {min_tile}")
    if columns is not None and columns < 1:
        raise ValueError(f"columns must be >= 1 or None, got {columns}")
    if cmap is not None:
        colormap_lut(cmap)  # raises ValueError for an unknown name

    total, height, width = array.shape
    finite_all = np.isfinite(array)
    finite: BoolArray | None = None if bool(finite_all.all()) else finite_all

    channel_lo, channel_hi = _channel_minmax(array, finite)
    has_finite = channel_lo <= channel_hi
    layer_lo = float(channel_lo[has_finite].min()) if has_finite.any() else 0.0
    layer_hi = float(channel_hi[has_finite].max()) if has_finite.any() else 0.0

    shown_count = total if max_channels <= 0 else min(total, max_channels)
    if order == "index":
        ids = np.arange(shown_count)
        shown = array[:shown_count]
        shown_finite = None if finite is None else finite[:shown_count]
    else:
        score = _order_scores(array, finite, order, channel_hi)
        ids = np.argsort(-score, kind="stable")[:shown_count]
        shown = array[ids]
        shown_finite = None if finite is None else finite[ids]
    if shown_finite is not None and bool(shown_finite.all()):
        shown_finite = None

    data_lo, data_hi = shared if shared is not None else (layer_lo, layer_hi)
    signed_data = _range_is_signed(data_lo, data_hi)
    cmap_name, centred = _choose_cmap(cmap, signed_data)
    neutral = CENTER_LEVEL if centred else 0
    clip_text = f", clipped to p{percentiles[0]:g}-p{percentiles[1]:g}" if percentiles else ""
    how = "symmetric about 0" if centred else "min-max"

    constant = np.zeros(shown_count, dtype=bool)
    if shared is not None or norm == "layer":
        if shared is not None:
            lo, hi = shared
            norm_used, description = "shared", "shared range"
        else:
            if percentiles is not None:
                lo, hi = _flat_percentiles(array, finite, percentiles)
            else:
                lo, hi = layer_lo, layer_hi
            norm_used, description = "layer", f"per-layer {how}{clip_text}"
        if centred:
            magnitude = max(abs(lo), abs(hi))
            lo, hi = -magnitude, magnitude
        row_lo = np.full(shown_count, lo)
        row_hi = np.full(shown_count, hi)
        vmin, vmax = lo, hi
        range_text = f"range [{_fmt(lo)}, {_fmt(hi)}]"
        if centred:
            labels: tuple[str, ...] = (_fmt(lo), "0", "+" + _fmt(hi))
        else:
            labels = (_fmt(lo), _fmt(hi))
    else:
        shown_has = has_finite[ids]
        raw_lo = np.where(shown_has, channel_lo[ids], 0.0)
        raw_hi = np.where(shown_has, channel_hi[ids], 0.0)
        if percentiles is not None:
            rows = shown.reshape(shown_count, -1)
            rows_finite = None if shown_finite is None else shown_finite.reshape(shown_count, -1)
            row_lo, row_hi = _row_percentiles(rows, rows_finite, percentiles)
        else:
            row_lo, row_hi = raw_lo, raw_hi
        if centred:
            magnitude_c = np.maximum(np.abs(row_lo), np.abs(row_hi))
            row_lo, row_hi = -magnitude_c, magnitude_c
        constant = raw_lo == raw_hi
        if shown_has.any():
            vmin, vmax = float(row_lo[shown_has].min()), float(row_hi[shown_has].max())
        else:
            vmin = vmax = 0.0
        norm_used, description = "channel", f"per-channel {how}{clip_text}"
        range_text = f"layer range [{_fmt(layer_lo)}, {_fmt(layer_hi)}]"
        if percentiles is not None:
            p_lo, p_hi = f"p{percentiles[0]:g}", f"p{percentiles[1]:g}"
            labels = ("-|p|", "0", "+|p|") if centred else (f"ch {p_lo}", f"ch {p_hi}")
        else:
            labels = ("-|max|", "0", "+|max|") if centred else ("ch min", "ch max")

    levels = _map_levels(shown, row_lo, row_hi, constant, neutral, shown_finite)

    upscale = max(1, math.ceil(min_tile / max(height, width)))
    columns_used = min(columns, shown_count) if columns else math.ceil(math.sqrt(shown_count))
    body = _tile_grid(levels, columns_used, upscale)

    count_text = f"{shown_count} of {total} channel{'' if total == 1 else 's'}"
    if order != "index":
        count_text += f", sorted by {order}"
    header = _Header(
        title=title,
        info=f"{count_text}  |  {description}  |  {range_text}",
        labels=labels,
        nonfinite=shown_finite is not None,
    )
    canvas, header_height = _new_canvas(body.shape[0], body.shape[1], header)
    canvas[header_height:, : body.shape[1]] = body
    canvas.setflags(write=False)
    return GridImage(
        indices=canvas,
        palette=_palette(cmap_name),
        channels_shown=shown_count,
        channels_total=total,
        channel_ids=tuple(int(i) for i in ids),
        vmin=float(vmin),
        vmax=float(vmax),
        cmap=cmap_name,
        signed=centred,
        norm=norm_used,
        header_height=header_height,
        tile_shape=(height * upscale, width * upscale),
        grid_shape=(-(-shown_count // columns_used), columns_used),
        upscale=upscale,
    )


def render_vector(
    values: npt.ArrayLike,
    *,
    title: str,
    cmap: str | None = None,
    max_values: int = 4096,
) -> GridImage:
    """Draw a vector (pooled features, logits) as a heat strip wrapped into rows.

    Cells are 11 px squares on a 12 px pitch, 32 per row for up to 256 values and 64 per
    row beyond; each row is labelled on the left with the index of its first value. One
    range is used for the whole vector (``norm == "layer"``); signed data with the auto
    colormap is centred on 0 like :func:`render_grid`.

    Args:
        values: ``(C,)`` real array. Arrays with a single non-trivial axis, such as
            ``(1, C)`` or ``(C, 1, 1)``, are flattened.
        title: First header line.
        cmap: Matplotlib colormap name, or None for the automatic choice.
        max_values: Show the first this many values; 0 or negative shows all.

    Returns:
        The picture; ``channels_total`` is C and ``tile_shape`` the size of one cell.

    Raises:
        ValueError: A malformed array or an unknown colormap.
    """
    array = _as_float32(values, "values")
    if array.ndim != 1:
        if sum(1 for n in array.shape if n != 1) > 1 or array.ndim == 0:
            raise ValueError(f"values must be a (C,) vector, got shape {array.shape}")
        array = array.reshape(-1)
    if array.size == 0:
        raise ValueError("values must not be empty")
    if cmap is not None:
        colormap_lut(cmap)

    total = int(array.shape[0])
    shown_count = total if max_values <= 0 else min(total, max_values)
    finite_all = np.isfinite(array)
    finite: BoolArray | None = None if bool(finite_all.all()) else finite_all
    lo_all, hi_all = _channel_minmax(array[None], None if finite is None else finite[None])
    lo, hi = (float(lo_all[0]), float(hi_all[0])) if lo_all[0] <= hi_all[0] else (0.0, 0.0)

    signed_data = _range_is_signed(lo, hi)
    cmap_name, centred = _choose_cmap(cmap, signed_data)
    if centred:
        magnitude = max(abs(lo), abs(hi))
        lo, hi = -magnitude, magnitude
    shown = array[:shown_count]
    shown_finite = None if finite is None else finite[:shown_count]
    if shown_finite is not None and bool(shown_finite.all()):
        shown_finite = None
    levels = _map_levels(
        shown[None],
        np.array([lo]),
        np.array([hi]),
        np.zeros(1, dtype=bool),
        CENTER_LEVEL if centred else 0,
        None if shown_finite is None else shown_finite[None],
    )[0]

    per_row = 32 if shown_count <= 256 else 64
    per_row = min(per_row, shown_count)
    rows = -(-shown_count // per_row)
    padded = np.full(rows * per_row, BACKGROUND, dtype=np.uint8)
    padded[:shown_count] = levels
    cells = np.full((rows, _CELL_PITCH, per_row, _CELL_PITCH), BACKGROUND, dtype=np.uint8)
    cells[:, :_CELL, :, :_CELL] = padded.reshape(rows, 1, per_row, 1)
    strip = cells.reshape(rows * _CELL_PITCH, per_row * _CELL_PITCH)

    row_labels = [str(r * per_row) for r in range(rows)]
    gutter = max(_text_width(label, _ROW_LABEL_SIZE) for label in row_labels) + 2 * GAP
    body_height = GAP + strip.shape[0] + GAP
    body_width = gutter + strip.shape[1] + GAP

    how = "symmetric about 0" if centred else "min-max"
    range_text = f"range [{_fmt(lo)}, {_fmt(hi)}]"
    labels = (_fmt(lo), "0", "+" + _fmt(hi)) if centred else (_fmt(lo), _fmt(hi))
    count_text = f"{shown_count} of {total} value{'' if total == 1 else 's'}"
    header = _Header(
        title=title,
        info=f"{count_text}  |  one range, {how}  |  {range_text}",
        labels=labels,
        nonfinite=shown_finite is not None,
    )
    canvas, header_height = _new_canvas(body_height, body_width, header)
    top = header_height + GAP
    canvas[top : top + strip.shape[0], gutter : gutter + strip.shape[1]] = strip
    label_offset = (_CELL - _line_height(_ROW_LABEL_SIZE)) // 2
    for r, label in enumerate(row_labels):
        x = gutter - GAP - _text_width(label, _ROW_LABEL_SIZE)
        _paste_text(canvas, label, _ROW_LABEL_SIZE, x, max(0, top + r * _CELL_PITCH + label_offset))
    canvas.setflags(write=False)
    return GridImage(
        indices=canvas,
        palette=_palette(cmap_name),
        channels_shown=shown_count,
        channels_total=total,
        channel_ids=tuple(range(shown_count)),
        vmin=float(lo),
        vmax=float(hi),
        cmap=cmap_name,
        signed=centred,
        norm="layer",
        header_height=header_height,
        tile_shape=(_CELL, _CELL),
        grid_shape=(rows, per_row),
        upscale=1,
    )
