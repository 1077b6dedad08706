"""Drawing one image's captured layers: a grid PNG per layer, plus overlays and raw tensors.

Runs in the render threads: everything here works on CPU copies of one batch and writes
through ``output`` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from actviz.results import LayerResult
from actviz.run.gradients import draw_gradient
from actviz.run.job import (
    ImageJob,
    display_view,
    headed,
    header_notes,
    model_view,
    thumbnail_path,
)
from actviz.run.segmentation import write_segmentation

if TYPE_CHECKING:
    import numpy as np
    import torch

    from actviz.hooks import Capture

__all__ = ["draw_image", "summaries"]


def draw_image(job: ImageJob) -> list[LayerResult]:
    """Draw and write every capture of one image of a batch, one PNG each."""
    from actviz import output
    from actviz.render.png import picture_png

    captures = job.captures
    width = max(2, len(str(len(captures) - 1)))
    if job.thumbnail and job.model_input is not None:
        output.write_bytes(job.out_dir / thumbnail_path(job.folder), picture_png(model_view(job)))
    layers = [
        _draw_layer(job, order, cap, output.layer_filename(order, cap.key, width=width))
        for order, cap in enumerate(captures)
    ]
    if job.segmentation is not None and job.options.grids:
        write_segmentation(job)
    return layers


def _draw_layer(job: ImageJob, order: int, cap: Capture, filename: str) -> LayerResult:
    from actviz import output
    from actviz.layouts import to_drawable
    from actviz.render import grid as render

    opts = job.options
    assert cap.tensor is not None  # the pipeline records tensors
    sample = cap.tensor[job.index]
    shape = (1, *sample.shape)
    stats = None
    if cap.summary is not None:  # computed in the hook, on the device
        stats = cap.summary[job.index]
    elif job.stats_fn is not None:
        computed = job.stats_fn(cap.module, cap.tensor[job.index : job.index + 1])
        stats = computed[0] if computed else None
    if stats is not None:  # finite-only, like the summary: no need for both
        lo, hi, mean = stats.min, stats.max, stats.mean
    elif job.summaries:
        lo, hi, mean = job.summaries[order][job.index]
    else:  # statistics were asked for but this output has none (complex, 0-d)
        lo, hi, mean = summaries(cap.tensor[job.index : job.index + 1])[0]
    base: dict[str, Any] = {
        "key": cap.key,
        "module": cap.module,
        "module_type": cap.module_type,
        "call": cap.call,
        "shape": shape,
        "min": lo,
        "max": hi,
        "mean": mean,
        "kind": cap.kind,
        "stats": stats.to_dict() if stats is not None else None,
    }
    stem = filename.removesuffix(".png")
    tensor_file = None
    if opts.save_tensors is not None:
        rel = job.folder / f"{stem}.{opts.save_tensors}"
        output.write_tensor(job.out_dir / rel, sample, opts.save_tensors)
        tensor_file = rel.as_posix()
    # Attention maps are (heads, H, W) whatever the module's own output looks like.
    ctx = None if cap.kind == "attention" else job.contexts.get(cap.module)
    drawable = to_drawable(sample.numpy(), ctx, layout=opts.layout)
    base["pca_file"] = _write_pca(job, cap, drawable, stem)
    if not opts.grids:
        return LayerResult(
            **base,
            channels_shown=0,
            channels_total=0,
            file=None,
            layout=drawable.layout,
            note=drawable.note,
            tensor_file=tensor_file,
        )
    if drawable.kind == "none" or drawable.array is None:
        return LayerResult(
            **base,
            channels_shown=0,
            channels_total=0,
            file=None,
            layout="none",
            note=drawable.note,
            tensor_file=tensor_file,
        )
    title = f"{cap.key}   {cap.module_type}   {shape}"
    notes = header_notes(job, drawable.note)
    shared = opts.norm == "shared"
    if drawable.kind == "vector":
        grid = render.render_vector(
            drawable.array,
            title=title,
            cmap=opts.cmap,
            value_range=job.ranges.get(cap.key) if shared else None,
            notes=notes,
        )
    else:
        channels = _shared_channels(job, cap.key, drawable.array.shape[0])
        grid = render.render_grid(
            drawable.array,
            title=title,
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
        )
    rel = job.folder / filename
    output.write_bytes(job.out_dir / rel, grid.to_png(opts.png_compression))
    overlay_file = None
    if opts.overlay and drawable.kind == "maps":
        overlay_file = _write_overlay(job, cap, drawable.array, stem, title)
    gradient, gradient_file, cam_file, cam_note = draw_gradient(job, cap, stem, title)
    return LayerResult(
        **base,
        channels_shown=grid.channels_shown,
        channels_total=grid.channels_total,
        channels=list(grid.channel_ids) if drawable.kind == "maps" else None,
        file=rel.as_posix(),
        layout=drawable.layout,
        note=drawable.note,
        overlay=overlay_file,
        tensor_file=tensor_file,
        gradient=gradient,
        gradient_file=gradient_file,
        cam_file=cam_file,
        cam_note=cam_note,
    )


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


def _write_overlay(
    job: ImageJob, cap: Capture, maps: np.ndarray, stem: str, title: str
) -> str | None:
    """The layer's mean map (or one channel) blended over what the model saw, beside the
    plain input, under a header with the layer, what is shown, its range and a colour bar."""
    import numpy as np

    from actviz import output
    from actviz.render.legend import Header, fmt_value
    from actviz.render.overlay import cam_panel
    from actviz.render.png import picture_png

    if job.model_input is None:
        return None
    channel = job.options.overlay_channel
    if channel is not None and channel >= maps.shape[0]:
        return None  # this layer has fewer channels; the manifest shows no overlay for it
    heat = maps[channel] if channel is not None else maps.mean(axis=0)
    finite = np.isfinite(heat)
    if not finite.any():
        return None
    lo, hi = float(heat[finite].min()), float(heat[finite].max())
    heat = (heat - lo) / (hi - lo) if hi > lo else np.zeros_like(heat)
    what = f"channel {channel}" if channel is not None else f"mean of {maps.shape[0]} channels"
    header = Header(
        title=title,
        info=f"{what} over the input  |  min-max  |  range [{fmt_value(lo)}, {fmt_value(hi)}]",
        labels=(fmt_value(lo), fmt_value(hi)),
        nonfinite=False,
        notes=tuple(header_notes(job)),
    )
    pixels = cam_panel(display_view(job), [(what, heat)], cmap="inferno", alpha=0.55)
    rel = job.folder / f"{stem}_overlay.png"
    picture = headed(pixels, header, "inferno")
    output.write_bytes(job.out_dir / rel, picture_png(picture, job.options.png_compression))
    return rel.as_posix()


def summaries(batch: torch.Tensor) -> list[tuple[float, float, float]]:
    """Per image of a batch: min, max and mean over finite values (NaN when there are none).

    One vectorized pass per layer and batch; the masked path runs only for rows holding NaN
    or Inf.
    """
    import torch

    flat = batch.reshape(batch.shape[0], -1)
    if flat.shape[1] == 0:
        return [(math.nan, math.nan, math.nan)] * flat.shape[0]
    lo, hi = torch.aminmax(flat, dim=1)
    mean = flat.mean(dim=1)
    rows = list(zip(lo.tolist(), hi.tolist(), mean.tolist(), strict=True))
    for i, row in enumerate(rows):
        if not all(math.isfinite(v) for v in row):
            finite = flat[i][flat[i].isfinite()]
            rows[i] = (
                (float(finite.min()), float(finite.max()), float(finite.mean()))
                if finite.numel()
                else (math.nan, math.nan, math.nan)
            )
    return rows


def _write_pca(job: ImageJob, cap: Capture, drawable: Any, stem: str) -> str | None:
    """``<NN>_<layer>_pca.png``: what the model saw beside the layer's positions coloured by
    the run's three principal components; None when the layer has none (no positions)."""
    fit = job.pca.get(cap.key)
    if fit is None or drawable.kind != "maps" or drawable.array is None:
        return None
    if drawable.array.shape[0] != fit.mean.shape[0]:
        return None
    import numpy as np

    from actviz import output
    from actviz.render.pca import pca_picture, pca_rgb, project
    from actviz.render.png import encode_png

    rgb = pca_rgb(project(drawable.array, fit), fit, mask=job.options.pca_mask)
    view = np.asarray(model_view(job).convert("RGB")) if job.model_input is not None else None
    shape = "x".join(str(n) for n in cap.tensor.shape[1:]) if cap.tensor is not None else "?"
    picture = pca_picture(
        f"{cap.key}   {cap.module_type}   ({shape})   principal components",
        rgb,
        fit,
        view=view,
        notes=header_notes(job, drawable.note),
        mask=job.options.pca_mask,
    )
    rel = job.folder / f"{stem}_pca.png"
    output.write_bytes(
        job.out_dir / rel,
        encode_png(picture, level=job.options.png_compression, row_filter="up"),
    )
    return rel.as_posix()
