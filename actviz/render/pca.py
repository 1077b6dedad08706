"""Principal components as colour: a layer's channel vector at each position projected on
three components fitted once for the run, shown as RGB beside what the model saw.

Pure arrays: the fit (:class:`PcaFit`, made by :func:`actviz.run.pca.fit_pca`) and ``(C, H, W)``
maps in, pictures out; nothing is written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.render.panels import Panel, panel_sheet

__all__ = ["SIGN_CONVENTION", "PcaFit", "pca_picture", "pca_rgb", "project"]

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
    components = fit.components.astype(np.float64)
    # Channels first all the way (the float64 copy and the product read memory in order);
    # the mean is taken off the three projections, not off every value (float64: the
    # difference loses nothing the float32 result keeps).
    projected = components @ maps.reshape(c, h * w).astype(np.float64)
    projected -= (components @ fit.mean.astype(np.float64))[:, None]
    return np.ascontiguousarray(projected.T.reshape(h, w, 3), dtype=np.float32)


def pca_rgb(projected: F32, fit: PcaFit, *, mask: bool = False) -> U8:
    """Projections -> RGB, each component scaled by the fit's range (the same for every
    image); with ``mask``, positions where the first component is negative are black."""
    span = np.where(fit.high > fit.low, fit.high - fit.low, 1.0)
    scaled = projected - fit.low  # then in place: one array for every step
    scaled /= span
    np.clip(scaled, 0.0, 1.0, out=scaled)
    np.nan_to_num(scaled, copy=False, nan=0.0)
    scaled *= 255
    np.rint(scaled, out=scaled)
    rgb: U8 = scaled.astype(np.uint8)
    if mask:
        rgb[projected[..., 0] < 0] = _MASKED
    return rgb


def _scale(pixels: U8, height: int, width: int) -> int:
    """The whole factor that enlarges ``pixels`` to about ``height`` x ``width``."""
    h, w = pixels.shape[:2]
    return int(max(1, min(height // max(h, 1), width // max(w, 1))))


def pca_picture(
    title: str,
    rgb: U8,
    fit: PcaFit,
    *,
    view: U8 | None = None,
    notes: Sequence[str] = (),
    mask: bool = False,
) -> U8:
    """What the model saw and the components as RGB, side by side, under a header with each
    component's explained variance; ``(H, W, 3)`` uint8."""
    share = ", ".join(f"PC{i + 1} {v:.1%}" for i, v in enumerate(fit.explained))
    lines = [
        f"R, G, B = principal components 1, 2, 3; explained variance {share}",
        f"fitted once over {fit.images} image(s), {fit.vectors} positions (seed {fit.seed}); "
        f"colours scaled by each component's 1st-99th percentile; {SIGN_CONVENTION}",
    ]
    if mask:
        lines.append("black: background, where component 1 is negative")
    lines.extend(notes)
    size = view.shape[:2] if view is not None else (max(rgb.shape[0], 224), max(rgb.shape[1], 224))
    panels = []
    if view is not None:
        panels.append(Panel(view, "input"))
    label = f"components, {rgb.shape[0]} x {rgb.shape[1]}"
    panels.append(Panel(rgb, label, scale=_scale(rgb, *size)))
    return panel_sheet(title, lines, panels, columns=2)
