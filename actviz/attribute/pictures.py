"""One method's picture of one image, drawn as the CAMs are: what the model saw, the map over
it, and the map alone, under a header that says the method, the class and its probability,
how the map is scaled, and what its axiom came to.

A signed map (evidence for the class and against it) is drawn with a diverging colormap
centred on 0, scaled symmetrically; an unsigned one with the CAMs' colormap from 0. A map at
the input's resolution is scaled to the 99th percentile of its magnitude (a few pixels would
otherwise take the whole range), beyond which it is clipped; a coarse one (a rollout's patch
grid) to its maximum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz.render.overlay import blend, headed, panel_row
from actviz.render.png import picture_png

__all__ = ["SIGNED_CMAP", "UNSIGNED_CMAP", "Scaled", "attribution_png", "scaled"]

SIGNED_CMAP = "RdBu_r"
UNSIGNED_CMAP = "jet"
#: Maps with more values than this are scaled to a percentile of their magnitude.
PERCENTILE_ABOVE = 1024
PERCENTILE = 99.0


@dataclass(frozen=True)
class Scaled:
    """A map ready to draw: ``heat`` in ``[0, 1]`` (0.5 is 0 for a signed map), the value
    that reaches the end of the colour bar, and how it was chosen."""

    heat: npt.NDArray[np.float32]
    scale: float
    rule: str


def scaled(values: npt.ArrayLike, signed: bool) -> Scaled:
    """``values`` (a 2-D map) as :class:`Scaled`: symmetric around 0 when ``signed``."""
    array = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0)
    magnitude = np.abs(array)
    if array.size > PERCENTILE_ABOVE:
        scale = float(np.percentile(magnitude, PERCENTILE))
        rule = f"{PERCENTILE:g}th percentile of |a|" if signed else f"{PERCENTILE:g}th percentile"
    else:
        scale, rule = 0.0, "maximum of |a|" if signed else "maximum"
    if not scale > 0:
        scale = float(magnitude.max()) if magnitude.size else 0.0
        rule = "maximum of |a|" if signed else "maximum"
    if not scale > 0:
        scale = 1.0
    if signed:
        heat = 0.5 + 0.5 * np.clip(array / scale, -1.0, 1.0)
    else:
        heat = np.clip(array / scale, 0.0, 1.0)
    return Scaled(heat.astype(np.float32), scale, rule)


def attribution_png(
    view: object,
    shown: Scaled,
    *,
    signed: bool,
    title: str,
    what: str,
    notes: Sequence[str],
    alpha: float = 0.5,
) -> bytes:
    """The picture: the view, the map over it, the map alone, under a header.

    Args:
        view: The model-input frame (a Pillow image, :func:`actviz.render.display_view`).
        shown: The map, scaled.
        signed: Draw with the diverging colormap centred on 0.
        title: The header's first line (the image, the method, the class).
        what: The method's title, for the panels' labels.
        notes: Further lines (the axiom, random weights, what the run changed).
        alpha: Weight of the map's colours over the view.
    """

    from actviz.render.legend import Header, fmt_value

    assert isinstance(view, Image.Image)
    cmap = SIGNED_CMAP if signed else UNSIGNED_CMAP
    panels = [
        ("input", np.asarray(view.convert("RGB"), dtype=np.uint8)),
        ("over the input", blend(view, shown.heat, cmap=cmap, alpha=alpha)),
        (f"{what} alone", blend(view, shown.heat, cmap=cmap, alpha=1.0)),
    ]
    scale = fmt_value(shown.scale)
    if signed:
        info = (
            f"red: evidence for the class, blue: against  |  scaled to \N{PLUS-MINUS SIGN}{scale} "
            f"({shown.rule}), clipped beyond"
        )
        labels: tuple[str, ...] = (f"-{scale}", "0", f"+{scale}")
    else:
        info = f"scaled to {scale} ({shown.rule}), clipped beyond"
        labels = ("0", scale)
    header = Header(title=title, info=info, labels=labels, nonfinite=False, notes=tuple(notes))
    return picture_png(headed(panel_row(panels), header, cmap))
