"""Principal components as colour: a layer's channel vector at each position projected on
three components fitted once for the run, shown as RGB under what the model saw.

Pure arrays: the fit (:class:`PcaFit`, made by :func:`actviz.run.pca.fit_pca`) and ``(C, H, W)``
maps in, pictures out; nothing is written here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.render.panels import Panel, panel_band, panel_bands, sheet_width, text_band
from actviz.render.png import deflate_bands, join_bands

if TYPE_CHECKING:
    from actviz.render.png import Band, Bands

__all__ = [
    "SIGN_CONVENTION",
    "PcaFit",
    "components_band",
    "components_bands",
    "input_band",
    "pca_lines",
    "pca_png",
    "pca_pngs",
    "pca_rgb",
    "pca_width",
    "project",
    "shared_input",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]

#: How each component's sign is fixed, so the same data always gives the same colours.
SIGN_CONVENTION = "each component's largest-magnitude loading is positive"
#: Where masked positions go: black.
_MASKED = 0


@dataclass(frozen=True)
class PcaFit:
    """Three principal components of one layer's channel vectors, fitted once for a run.

    Attributes:
        mean: ``(C,)`` the mean vector that is subtracted first.
        components: ``(3, C)`` unit components, signs fixed by :data:`SIGN_CONVENTION`
            (rows of zeros when the layer has fewer than three channels).
        explained: The share of the sample's variance each component explains.
        low: ``(3,)`` each component's 1st percentile over the sample: colour 0.
        high: ``(3,)`` its 99th percentile: colour 255.
        vectors: How many vectors the fit used.
        images: How many images they came from.
        seed: The seed that chose them.
    """

    mean: F32
    components: F32
    explained: tuple[float, ...]
    low: F32
    high: F32
    vectors: int
    images: int
    seed: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the manifest."""
        return {
            "explained_variance": [round(v, 6) for v in self.explained],
            "vectors": self.vectors,
            "images": self.images,
            "seed": self.seed,
            "sign": SIGN_CONVENTION,
        }


def project(maps: F32, fit: PcaFit) -> F32:
    """``(C, H, W)`` maps -> ``(H, W, 3)`` projections on the fit's components."""
    c, h, w = maps.shape
    # One float32 product over the maps as they lie, channels first: a float64 copy of them
    # made it three times slower, for colours of 255 levels (the outputs themselves change
    # in their last bits with the batch's composition). The mean is taken off the three
    # projections, its own projection in float64.
    flat = np.asarray(maps, dtype=np.float32).reshape(c, h * w)
    projected = fit.components.astype(np.float32) @ flat
    offset = fit.components.astype(np.float64) @ fit.mean.astype(np.float64)
    projected -= offset.astype(np.float32)[:, None]
    return np.ascontiguousarray(projected.T.reshape(h, w, 3))


def pca_rgb(projected: F32, fit: PcaFit, *, mask: bool = False) -> U8:
    """Projections -> RGB, each component scaled by the fit's range (the same for every
    image); with ``mask``, positions where the first component is negative are black."""
    span = np.where(fit.high > fit.low, fit.high - fit.low, 1.0)
    scaled = projected - fit.low  # then in place: one array for every step
    scaled /= span
    # fmax and fmin take the number where the other is NaN: clipped to 0-1, NaN to 0, in
    # two passes (np.nan_to_num after np.clip was five).
    np.fmax(scaled, 0.0, out=scaled)
    np.fmin(scaled, 1.0, out=scaled)
    scaled *= 255
    np.rint(scaled, out=scaled)
    rgb: U8 = scaled.astype(np.uint8)
    if mask:
        rgb[projected[..., 0] < 0] = _MASKED
    return rgb


def _scale(shape: tuple[int, ...], height: int, width: int) -> int:
    """The whole factor that enlarges pixels of ``shape`` to about ``height`` x ``width``."""
    h, w = shape[:2]
    return int(max(1, min(height // max(h, 1), width // max(w, 1))))


def pca_lines(fit: PcaFit, *, notes: Sequence[str] = (), mask: bool = False) -> tuple[str, ...]:
    """The header's lines under the title: what the colours are and how they were fitted."""
    share = ", ".join(f"PC{i + 1} {v:.1%}" for i, v in enumerate(fit.explained))
    lines = [
        f"R, G, B = principal components 1, 2, 3; explained variance {share}",
        f"fitted once over {fit.images} image(s), on {fit.vectors} positions sampled from "
        f"them (seed {fit.seed}); "
        f"colours scaled by each component's 1st-99th percentile; {SIGN_CONVENTION}",
    ]
    if mask:
        lines.append("black: background, where component 1 is negative")
    return (*lines, *notes)


def _panel_size(view_shape: tuple[int, ...] | None, rgb_shape: tuple[int, ...]) -> tuple[int, int]:
    """The space the components are enlarged into: what the model saw, or at least 224."""
    if view_shape is not None:
        return view_shape[0], view_shape[1]
    return max(rgb_shape[0], 224), max(rgb_shape[1], 224)


def pca_width(view_shape: tuple[int, ...] | None, rgb_shape: tuple[int, ...] = (1, 1)) -> int:
    """The picture's width: one column, as wide as what the model saw (``view_shape``) or the
    components (``rgb_shape``) enlarged, whichever is wider."""
    size = _panel_size(view_shape, rgb_shape)
    wide = rgb_shape[1] * _scale(rgb_shape, *size)
    return sheet_width(max(size[1], wide))


def input_band(view: U8, width: int) -> U8:
    """What the model saw, labelled: the same band in every PCA picture of an image."""
    return panel_band(Panel(view, "input"), width)


def components_band(rgb: U8, width: int, view_shape: tuple[int, ...] | None = None) -> U8:
    """The components as RGB, enlarged to about the size of what the model saw, labelled."""
    band: U8 = components_bands(rgb[None], width, view_shape)[0]
    return band


def components_bands(rgbs: U8, width: int, view_shape: tuple[int, ...] | None = None) -> U8:
    """:func:`components_band` of each of ``(B, h, w, 3)`` images' components, at once."""
    shape = rgbs.shape[1:]
    label = f"components, {shape[0]} x {shape[1]}"
    return panel_bands(rgbs, label, _scale(shape, *_panel_size(view_shape, shape)), width)


def shared_input(bands: Bands, view: Callable[[], U8], image: Hashable | None, width: int) -> Band:
    """What the model saw (``view()``) as a band ``width`` wide, deflated once and kept in
    ``bands`` under ``image``, for every PCA picture of that image (made each time when
    ``image`` is None)."""

    def band() -> U8:
        return input_band(view(), width)

    return bands.band(band()) if image is None else bands.shared(("input", image, width), band)


def pca_png(
    title: str,
    rgb: U8,
    fit: PcaFit,
    bands: Bands,
    *,
    view_shape: tuple[int, ...] | None = None,
    view: Callable[[], U8] | None = None,
    image: Hashable | None = None,
    notes: Sequence[str] = (),
    mask: bool = False,
) -> bytes:
    """What the model saw above the components as RGB, under a header with each component's
    explained variance, as PNG bytes (:func:`pca_pngs` of one image)."""
    views = None if view is None else [view]
    return pca_pngs(
        title,
        rgb[None],
        fit,
        bands,
        view_shape=view_shape,
        views=views,
        images=[image],
        notes=notes,
        mask=mask,
    )[0]


def pca_pngs(
    title: str,
    rgbs: U8,
    fit: PcaFit,
    bands: Bands,
    *,
    view_shape: tuple[int, ...] | None = None,
    views: Sequence[Callable[[], U8]] | None = None,
    images: Sequence[Hashable | None] = (),
    notes: Sequence[str] = (),
    mask: bool = False,
) -> list[bytes]:
    """The PCA pictures of one layer for several images (``(B, h, w, 3)`` components as
    RGB, what each saw of ``view_shape``), as PNG bytes each.

    Each is one column of bands joined without deflating them again
    (:func:`~actviz.render.png.join_bands`): the header, the same in every picture of a
    layer, kept in ``bands``; what the model saw (``views[i]()``), kept under ``images[i]``
    (:func:`shared_input`); the components, enlarged, filtered and labelled for all the
    images at once. So a run deflates a header once per layer and a photo once per image."""

    width = pca_width(view_shape, rgbs.shape[1:])
    lines = pca_lines(fit, notes=notes, mask=mask)
    header = bands.shared(("header", title, lines, width), lambda: text_band(title, lines, width))
    components = deflate_bands(
        components_bands(rgbs, width, view_shape), level=bands.level, row_filter=bands.row_filter
    )
    pngs = []
    for i, band in enumerate(components):
        parts = [header]
        if views is not None:
            image = images[i] if i < len(images) else None
            parts.append(shared_input(bands, views[i], image, width))
        parts.append(band)
        pngs.append(join_bands(parts))
    return pngs
