"""Difference pictures: A's grid, B's grid and the signed difference B - A, side by side.

The three panels show the same channels. A and B share one value range per layer (so the same
colour means the same value in both), and the difference uses the diverging ``RdBu_r``
colormap centred on 0 with one symmetric scale per layer across every pictured image: white is
no difference, red is B above A, blue is B below A. The panels are drawn by the renderer that
draws ``actviz run``'s grids and composed here with numpy; nothing here writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render import (
    BACKGROUND,
    N_LEVELS,
    TEXT,
    GridImage,
    fmt_value,
    line_height,
    paste_text,
    render_grid,
    text_width,
)
from actviz.render.theme import CAPTION_SIZE, PAD

__all__ = ["DIFF_CMAP", "DiffPanels", "PictureScale", "caption_lines", "compose", "render_diff"]

#: The colormap of the difference panel, centred on 0.
DIFF_CMAP = "RdBu_r"
_GAP = 14

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]


#: A and B's shared range, and the difference's symmetric one, span these percentiles of the
#: pictured images' values, so a few outliers do not wash every tile out.
RANGE_PERCENTILES = (0.5, 99.5)


@dataclass
class PictureScale:
    """One layer's scale over the pictured images, measured before any of them is drawn.

    Attributes:
        lo, hi: A and B's shared range: the lowest 0.5th and the highest 99.5th percentile
            of A's and B's values over the images.
        diff_max: The highest 99.5th percentile of ``|B - A|`` (its maximum where that is 0).
        channel_score: Per channel, the summed mean ``|B - A|``: which channels differ most.
        images: Pictured images measured.
    """

    lo: float = math.inf
    hi: float = -math.inf
    diff_max: float = 0.0
    diff_peak: float = 0.0
    channel_score: npt.NDArray[np.float64] | None = None
    images: int = 0

    def update(self, a: F32, b: F32) -> None:
        """Measure one image's drawable arrays, ``(C, H, W)`` maps or ``(C,)`` vectors."""
        low, high = RANGE_PERCENTILES
        values = np.concatenate([a.reshape(-1), b.reshape(-1)])
        values = values[np.isfinite(values)]
        if values.size:
            lo, hi = np.percentile(values, [low, high])
            self.lo, self.hi = min(self.lo, float(lo)), max(self.hi, float(hi))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(b.astype(np.float32) - a.astype(np.float32))
        diff = np.where(np.isfinite(diff), diff, 0.0)
        if diff.size:
            self.diff_max = max(self.diff_max, float(np.percentile(diff, high)))
            self.diff_peak = max(self.diff_peak, float(diff.max()))
        score = diff.reshape(diff.shape[0], -1).mean(axis=1, dtype=np.float64)
        self.channel_score = score if self.channel_score is None else self.channel_score + score
        self.images += 1

    @property
    def value_range(self) -> tuple[float, float]:
        """A and B's shared range (0, 0 when nothing finite was seen)."""
        return (self.lo, self.hi) if self.lo <= self.hi else (0.0, 0.0)

    @property
    def identical(self) -> bool:
        """B equals A exactly on every pictured image (every finite difference is 0)."""
        return self.images > 0 and self.diff_peak == 0.0

    @property
    def diff_range(self) -> tuple[float, float]:
        """The difference panel's symmetric range; ``(-1, 1)`` when B equals A, so that zero
        is still drawn in the centre colour."""
        m = self.diff_max if self.diff_max > 0 else self.diff_peak
        return (-m, m) if m > 0 else (-1.0, 1.0)


@dataclass(frozen=True)
class DiffPanels:
    """The three pictures of one layer and image, and the channels they show."""

    a: GridImage
    b: GridImage
    diff: GridImage
    channels: tuple[int, ...]
    channels_total: int
    identical: bool = False
    """B equals A on every pictured image: no channel differs more than another."""


def render_diff(
    a: F32,
    b: F32,
    *,
    titles: tuple[str, str, str],
    scale: PictureScale,
    max_channels: int = 16,
) -> DiffPanels:
    """Draw A, B and B - A for one image's drawable arrays (same shape).

    Args:
        a, b: ``(C, H, W)`` maps, or ``(C,)`` vectors (drawn as one cell per channel).
        titles: The header titles of the three panels.
        scale: The layer's scale over every pictured image (:class:`PictureScale`).
        max_channels: The channels where B and A differ most over the pictured images
            (index order on ties), shown in index order; 0 shows all.

    Returns:
        The three panels.

    Raises:
        ValueError: If the shapes differ.
    """
    if a.shape != b.shape:
        raise ValueError(f"A has shape {a.shape} and B {b.shape}")
    if a.ndim == 1:  # a vector: each value a 1 x 1 map, so it is chosen and drawn like one
        a, b = a.reshape(-1, 1, 1), b.reshape(-1, 1, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = (b.astype(np.float32) - a.astype(np.float32)).astype(np.float32)
    total = int(a.shape[0])
    shown = total if max_channels <= 0 else min(total, max_channels)
    score = scale.channel_score if scale.channel_score is not None else np.zeros(total)
    chosen = [int(c) for c in np.sort(np.argsort(-score, kind="stable")[:shown])]
    identical = scale.identical
    if shown == total:
        note = None
    elif identical:  # no channel differs more than another: the first ones, said as such
        note = "the first ones: B and A are identical"
    else:
        note = "the ones where B and A differ most"
    common: dict[str, Any] = {"channels": chosen, "channels_note": note}
    diff_title = f"{titles[2]}   identical: 0 everywhere" if identical else titles[2]
    return DiffPanels(
        render_grid(a, title=titles[0], value_range=scale.value_range, **common),
        render_grid(b, title=titles[1], value_range=scale.value_range, **common),
        render_grid(diff, title=diff_title, cmap=DIFF_CMAP, value_range=scale.diff_range, **common),
        tuple(chosen),
        total,
        identical,
    )


def compose(panels: DiffPanels, caption: list[str]) -> tuple[Image.Image, list[list[int]]]:
    """The three panels side by side under a caption band, as one palette picture.

    When A and B are drawn with another colormap than the difference (``viridis`` for
    non-negative layers), the two colormaps share the palette at half resolution (126 and
    125 levels, still smooth to the eye); the special colours (background, text, NaN) are
    the renderer's own. One byte per pixel keeps the PNG small and fast to write.

    Returns:
        The picture, and each panel's box ``[x, y, width, height]`` in it.
    """
    grids = (panels.a, panels.b, panels.diff)
    palette, maps = _shared_palette(grids)
    pictures = [lut[g.indices] for g, lut in zip(grids, maps, strict=True)]
    line = line_height(CAPTION_SIZE) + 3
    caption_height = 2 * PAD + len(caption) * line
    # Headers that wrap to more lines push their tiles down: align the tiles instead.
    headers = max(g.header_height for g in grids)
    offsets = [headers - g.header_height for g in grids]
    width = sum(p.shape[1] for p in pictures) + _GAP * (len(pictures) - 1)
    height = caption_height + max(p.shape[0] + o for p, o in zip(pictures, offsets, strict=True))
    canvas = np.full((height, width), BACKGROUND, dtype=np.uint8)
    for row, text in enumerate(caption):
        y = PAD + row * line
        paste_text(canvas, _fit(text, width - 2 * PAD), CAPTION_SIZE, PAD, y)
    boxes = []
    x = 0
    for i, (picture, offset) in enumerate(zip(pictures, offsets, strict=True)):
        h, w = picture.shape
        top = caption_height + offset
        canvas[top : top + h, x : x + w] = picture
        boxes.append([x, top, w, h])
        x += w
        if i < len(pictures) - 1:
            canvas[caption_height:, x + _GAP // 2] = TEXT  # a thin rule between the panels
            x += _GAP
    image = Image.frombytes("P", (width, height), canvas.tobytes())
    image.putpalette(palette.tobytes(), rawmode="RGB")
    return image, boxes


def _shared_palette(grids: tuple[GridImage, ...]) -> tuple[U8, list[U8]]:
    """One palette for the three pictures, and per picture the map from its palette indices
    to the shared ones."""
    identity = np.arange(256, dtype=np.uint8)
    first = grids[0].palette
    if all(np.array_equal(g.palette, first) for g in grids):
        return first, [identity] * len(grids)
    low = N_LEVELS // 2 + 1  # levels 0 .. low - 1 for A and B, low .. N_LEVELS - 1 for B - A
    palette = first.copy()
    ab = np.rint(np.arange(low) * (N_LEVELS - 1) / (low - 1)).astype(int)
    dd = np.rint(np.arange(N_LEVELS - low) * (N_LEVELS - 1) / (N_LEVELS - low - 1)).astype(int)
    palette[:low] = first[ab]
    palette[low:N_LEVELS] = grids[-1].palette[dd]
    to_ab = identity.copy()
    to_dd = identity.copy()
    levels = np.arange(N_LEVELS)
    to_ab[:N_LEVELS] = np.rint(levels * (low - 1) / (N_LEVELS - 1)).astype(np.uint8)
    to_dd[:N_LEVELS] = low + np.rint(levels * (N_LEVELS - low - 1) / (N_LEVELS - 1)).astype(
        np.uint8
    )
    return palette, [to_ab if np.array_equal(g.palette, first) else to_dd for g in grids]


def caption_lines(
    key: str,
    image: str,
    panels: DiffPanels,
    *,
    cosine: float | None,
    rel_l2: float | None,
    scope: str,
) -> list[str]:
    """The caption of one difference picture: what it compares, how this image's layer
    scores, and how the panels are scaled (``scope``: over which images, e.g. "over the 4
    pictured images")."""
    scores = []
    if cosine is not None:
        scores.append(f"cosine {cosine:.4f}")
    if rel_l2 is not None:
        scores.append(f"rel. L2 {fmt_value(rel_l2)}")
    first = "   |   ".join([key, image, *scores, "panels: A, B, B - A"])
    count, total = len(panels.channels), panels.channels_total
    low, high = RANGE_PERCENTILES
    if panels.identical:
        which = f"all {count} channels" if count == total else f"the first {count} of {total}"
        return [first, f"{which}; B and A are identical {scope}: B - A is 0 everywhere"]
    which = (
        f"all {count} channels"
        if count == total
        else f"the {count} of {total} channels where B and A differ most {scope}"
    )
    second = (
        f"{which}; A and B share one range, B - A is symmetric about 0 (p{low:g}-p{high:g} {scope})"
    )
    return [first, second]


def _fit(text: str, width: int) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels."""
    if text_width(text, CAPTION_SIZE) <= width:
        return text
    while text and text_width(text + "...", CAPTION_SIZE) > width:
        text = text[:-1]
    return text + "..."
