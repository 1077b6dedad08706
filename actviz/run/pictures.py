"""The per-layer picture kinds of a run, registered in one place.

Each kind is a maker (:class:`~actviz.run.record.LayerView` in, :class:`~actviz.run.record.Drawn`
out: PNG bytes and what it adds to the layer's record), the name the layer record holds its
file under, the key ``manifest.json`` gives that file, the suffix of its file name, and
whether it is drawn only beside a grid. Adding a kind is one maker and one row of
:data:`PICTURE_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.render import grid as render
from actviz.render.overlay import cam_panel
from actviz.render.pca import pca_pngs, pca_rgb, project, shared_input
from actviz.render.png import Bands, picture_png
from actviz.render.timestrips import render_time_strips
from actviz.run.gradients import cam_picture, gradient_picture
from actviz.run.job import ImageJob, display_view, headed, header_notes, model_view
from actviz.run.record import Drawn, LayerView

if TYPE_CHECKING:
    import numpy as np

    from actviz.render.png import Band, Bands

__all__ = [
    "PICTURE_KINDS",
    "PictureKind",
    "grid_picture",
    "overlay_picture",
    "pca_input",
    "pca_picture",
    "pca_pictures",
]


@dataclass(frozen=True)
class PictureKind:
    """One kind of per-layer picture.

    Attributes:
        name: Its key in :attr:`LayerResult.pictures <actviz.results.LayerResult.pictures>`.
        record_key: The key of its file in the layer's ``manifest.json`` record.
        suffix: What its file name adds to the grid's stem (``_overlay``).
        make: The maker; None when the layer gets no such picture.
        with_grid: Drawn only for a layer whose grid is drawn (not with ``grids`` off, nor
            for an output that cannot be drawn as a grid).
    """

    name: str
    record_key: str
    suffix: str
    make: Callable[[LayerView], Drawn | None]
    with_grid: bool = True


def grid_picture(view: LayerView) -> Drawn | None:
    """The feature-map grid (a strip for a vector), under its header."""

    job, cap, drawable = view.job, view.cap, view.drawable
    if drawable.array is None:
        return None
    opts = job.options
    # A token layer's prefix tokens go in a band above each tile, and its note says so.
    prefix = drawable.prefix if drawable.kind == "maps" else None
    notes = header_notes(
        job, drawable.prefix_note if drawable.prefix is not None else drawable.note
    )
    shared = opts.norm == "shared"
    if drawable.kind == "clip":
        return _clip_picture(view, notes)
    if drawable.kind == "vector":
        grid = render.render_vector(
            drawable.array,
            title=view.title,
            cmap=opts.cmap,
            value_range=job.ranges.get(cap.key) if shared else None,
            notes=notes,
        )
    else:
        channels = _shared_channels(job, cap.key, drawable.array.shape[0])
        grid = render.render_grid(
            drawable.array,
            title=view.title,
            max_channels=opts.max_channels,
            order=opts.order,
            norm="channel" if opts.norm == "channel" else "layer",
            value_range=job.ranges.get(cap.key) if shared else None,
            clip=opts.clip,
            cmap=opts.cmap,
            channels=channels,
            channels_note=(
                f"sorted by {opts.order} over {_count(job.shared_images, 'image')}"
                if channels is not None
                else None
            ),
            notes=notes,
            channel_names=job.channel_names.get(cap.module),
            prefix=prefix,
            # An attention map's tiles are its heads.
            unit=_unit(view),
        )
    return Drawn(
        grid.to_png(opts.png_compression),
        {
            "channels_shown": grid.channels_shown,
            "channels_total": grid.channels_total,
            "channels": list(grid.channel_ids) if drawable.kind == "maps" else None,
            "prefix_tokens": 0 if prefix is None else int(prefix.shape[1]),
        },
    )


#: Rows of a video layer's time strips at most: each row is a channel's every frame.
CLIP_ROWS = 16


def _clip_picture(view: LayerView, notes: list[str]) -> Drawn:
    """A video layer's ``(C, T, H, W)`` as time strips: channels as rows, frames as columns."""

    job, cap, drawable = view.job, view.cap, view.drawable
    assert drawable.array is not None
    opts = job.options
    rows = min(opts.max_channels, CLIP_ROWS) if opts.max_channels > 0 else CLIP_ROWS
    strips = render_time_strips(
        drawable.array,
        title=view.title,
        max_channels=rows,
        order=opts.order,
        norm="layer" if opts.norm == "layer" else "channel",
        value_range=job.ranges.get(cap.key) if opts.norm == "shared" else None,
        clip=opts.clip,
        cmap=opts.cmap,
        notes=notes,
        prefix=drawable.prefix,
        # Both pictures of a flow pair in one batch (actviz.windows): frame 1 and frame 2.
        frame_names=("frame 1", "frame 2") if cap.rows and "pair" in cap.rows else None,
    )
    return Drawn(
        strips.to_png(opts.png_compression),
        {
            "channels_shown": strips.channels_shown,
            "channels_total": strips.channels_total,
            "channels": list(strips.channel_ids),
            "prefix_tokens": 0 if drawable.prefix is None else int(drawable.prefix.shape[1]),
        },
    )


def overlay_picture(view: LayerView) -> Drawn | None:
    """The layer's mean map (or one channel) blended over what the model saw, beside the
    plain input, under a header with the layer, what is shown, its range and a colour bar."""

    from actviz.render.legend import Header, fmt_value

    job, maps = view.job, view.drawable.array
    if not job.options.overlay or view.drawable.kind != "maps" or maps is None:
        return None
    if job.model_input is None:
        return None
    channel = job.options.overlay_channel
    if channel is not None and channel >= maps.shape[0]:
        return None  # this layer has fewer channels; the manifest shows no overlay for it
    heat: np.ndarray = maps[channel] if channel is not None else maps.mean(axis=0)
    finite = np.isfinite(heat)
    if not finite.any():
        return None
    lo, hi = float(heat[finite].min()), float(heat[finite].max())
    heat = (heat - lo) / (hi - lo) if hi > lo else np.zeros_like(heat)
    unit = _unit(view)  # an attention map's tiles are heads, a dictionary's are features
    what = f"{unit} {channel}" if channel is not None else f"mean of {maps.shape[0]} {unit}s"
    header = Header(
        title=view.title,
        info=f"{what} over the input  |  min-max  |  range [{fmt_value(lo)}, {fmt_value(hi)}]",
        labels=(fmt_value(lo), fmt_value(hi)),
        nonfinite=False,
        notes=tuple(header_notes(job)),
    )
    pixels = cam_panel(display_view(job), [(what, heat)], cmap="inferno", alpha=0.55)
    picture = headed(pixels, header, "inferno")
    return Drawn(picture_png(picture, job.options.png_compression))


#: PCA pictures made at once, at most: each holds its enlarged, labelled and filtered bands
#: (a few MB at 512 px), which a batch size and the render threads would otherwise multiply.
PCA_TOGETHER = 8


def pca_picture(
    view: LayerView, bands: Bands | None = None, image: Hashable | None = None
) -> Drawn | None:
    """What the model saw above the layer's positions coloured by the run's three principal
    components (``--view pca``); None when the layer has none (no positions).

    ``bands``: the deflated bands the run's PCA pictures share, kept by the caller: each
    layer's header, and what the model saw of the image named ``image`` (deflated once for
    all its layers, not once a layer: it was most of a picture's encoding)."""
    return pca_pictures([view], bands, [image])[0]


def pca_pictures(
    views: Sequence[LayerView], bands: Bands | None = None, images: Sequence[Hashable] = ()
) -> list[Drawn | None]:
    """:func:`pca_picture` of one layer for several images (``views``, of one capture;
    ``images[i]``: the key of ``views[i]``'s image in ``bands``): the pictures of the same
    size coloured, enlarged and filtered at once."""

    drawn: list[Drawn | None] = [None] * len(views)
    if not views:
        return drawn
    job, cap = views[0].job, views[0].cap
    fit = job.pca.get(cap.key)
    if fit is None:
        return drawn
    bands = bands or Bands(level=job.options.png_compression, row_filter="up")
    shape = "x".join(str(n) for n in cap.tensor.shape[1:]) if cap.tensor is not None else "?"
    title = f"{cap.key}   {cap.module_type}   ({shape})   principal components"
    # Pictures alike (the same size of components and of what the model saw, the same
    # notes) are drawn together: in a batch, all of them.
    alike: dict[tuple[Any, ...], list[int]] = {}
    maps: dict[int, np.ndarray] = {}
    for i, view in enumerate(views):
        array = view.drawable.array
        if view.drawable.kind != "maps" or array is None or array.shape[0] != fit.mean.shape[0]:
            continue
        maps[i] = array
        seen = None if view.job.model_input is None else tuple(view.job.model_input.shape[-2:])
        alike.setdefault((array.shape, seen, view.drawable.note), []).append(i)
    mask = job.options.pca_mask
    for (_, seen, note), together in alike.items():
        for start in range(0, len(together), PCA_TOGETHER):
            members = together[start : start + PCA_TOGETHER]
            projected = np.stack([project(maps[i], fit) for i in members])
            pngs = pca_pngs(
                title,
                pca_rgb(projected, fit, mask=mask),
                fit,
                bands,
                view_shape=seen,
                views=None if seen is None else [_seen(views[i].job) for i in members],
                images=[images[i] if i < len(images) else None for i in members],
                notes=header_notes(job, note),
                mask=mask,
            )
            for i, png in zip(members, pngs, strict=True):
                drawn[i] = Drawn(png)
    return drawn


def pca_input(job: ImageJob, bands: Bands, image: Hashable, width: int) -> Band:
    """What the model saw of the image, deflated ahead into ``bands`` under ``image``: the
    band every PCA picture of it ``width`` wide shares."""

    return shared_input(bands, _seen(job), image, width)


def _seen(job: ImageJob) -> Callable[[], np.ndarray]:
    """What the model saw, as RGB, made when asked (once per image when it is shared)."""

    def seen() -> np.ndarray:

        return np.asarray(model_view(job).convert("RGB"))

    return seen


PICTURE_KINDS: list[PictureKind] = [
    PictureKind("grid", "file", "", grid_picture),
    PictureKind("overlay", "overlay", "_overlay", overlay_picture),
    PictureKind("gradient", "gradient_file", "_grad", gradient_picture),
    PictureKind("cam", "cam", "_cam", cam_picture),
    PictureKind("pca", "pca", "_pca", pca_picture, with_grid=False),
]
"""Every per-layer picture kind, in drawing order (the grid first)."""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _shared_channels(job: ImageJob, key: str, total: int) -> Sequence[int] | None:
    """The channels chosen once for the run (``--norm shared`` with a sort), if any."""
    if job.options.norm != "shared" or job.options.order == "index":
        return None
    chosen = job.shared_channels.get(key)
    if not chosen or max(chosen) >= total:
        return None  # not measured, or this image's output has fewer channels
    return chosen


def _unit(view: LayerView) -> str:
    """What one tile is: a channel, an attention map's head, or a dictionary's feature."""
    if view.cap.kind == "attention":
        return "head"
    return "feature" if view.drawable.layout == "features" else "channel"
