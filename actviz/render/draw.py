"""Drawing one image's captured layers: a grid PNG per layer, plus overlays and raw tensors.

Runs in the render threads: everything here works on CPU copies of one batch and writes
through ``output`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.options import DrawOptions
from actviz.results import LayerResult

if TYPE_CHECKING:
    import numpy as np
    import torch
    from PIL import Image

    from actviz.hooks import Capture
    from actviz.layouts import LayerContext, Layout
    from actviz.render.palette import GridImage

__all__ = [
    "ImageJob",
    "draw_image",
    "render_activation",
    "model_view",
    "summaries",
    "thumbnail_path",
]


@dataclass(frozen=True)
class ImageJob:
    """Everything needed to draw the layers of one image of a batch."""

    captures: Sequence[Capture]
    summaries: Sequence[Sequence[tuple[float, float, float]]]
    index: int
    folder: PurePosixPath
    out_dir: Path
    options: DrawOptions
    contexts: Mapping[str, LayerContext] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    model_input: torch.Tensor | None = None
    mean: Sequence[float] = ()
    std: Sequence[float] = ()
    thumbnail: bool = False
    gradients: Mapping[str, Any] = field(default_factory=dict)
    gradient_grids: bool = False
    stats_fn: Callable[[str, Any], Any] | None = None
    target: int | None = None
    cam_keys: frozenset[str] = frozenset()
    class_cams: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    channel_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Module name -> the name of each output channel (a segmentation head's classes)."""
    segmentation: str | None = None
    """The module whose output is a segmentation model's class logits: ``segmentation.png``."""


def render_activation(
    activation: torch.Tensor | np.ndarray,
    *,
    title: str = "",
    max_channels: int = 64,
    context: LayerContext | None = None,
    layout: Layout = "auto",
    **render_options: Any,
) -> GridImage:
    """Draw one activation of one image as a grid (or a strip, for a vector).

    Args:
        activation: One image's output: ``(C, H, W)`` maps, ``(H, W, C)`` channels-last,
            ``(1 + H*W, C)`` tokens, or ``(C,)``. A leading batch dimension of 1 is dropped.
        title: The header's first line.
        max_channels: Channels drawn at most (0 = all).
        context: What the model says about the layer (``actviz.layouts.layer_contexts``).
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        **render_options: Passed to ``actviz.render.grid.render_grid`` (``order``, ``norm``,
            ``value_range``, ``clip``, ``cmap``).

    Returns:
        The picture; ``.to_pil()`` gives a Pillow image, ``.to_rgb()`` an array.

    Raises:
        ValueError: When the activation cannot be drawn; the message says why.
    """
    import numpy as np

    from actviz.layouts import to_drawable
    from actviz.render import grid as render

    array = np.asarray(
        activation.detach().cpu().float().numpy() if hasattr(activation, "detach") else activation,
        dtype=np.float32,
    )
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    drawable = to_drawable(array, context, layout=layout)
    if drawable.kind == "none" or drawable.array is None:
        raise ValueError(drawable.note or f"cannot draw an output of shape {array.shape}")
    if drawable.kind == "vector":
        return render.render_vector(drawable.array, title=title, cmap=render_options.get("cmap"))
    return render.render_grid(
        drawable.array, title=title, max_channels=max_channels, **render_options
    )


def draw_image(job: ImageJob) -> list[LayerResult]:
    """Draw and write every capture of one image of a batch, one PNG each."""
    from actviz import output

    captures = job.captures
    width = max(2, len(str(len(captures) - 1)))
    if job.thumbnail and job.model_input is not None:
        output.write_png(
            job.out_dir / thumbnail_path(job.folder), model_view(job), compress_level=1
        )
    layers = [
        _draw_layer(job, order, cap, output.layer_filename(order, cap.key, width=width))
        for order, cap in enumerate(captures)
    ]
    if job.segmentation is not None and job.options.grids:
        from actviz.render.segmentation import write_segmentation

        write_segmentation(job)
    return layers


def model_view(job: ImageJob) -> Image.Image:
    """What the model saw (after resize and crop), de-normalized; greyscale input as grey."""
    from actviz.render.overlay import input_view

    assert job.model_input is not None
    x = job.model_input.numpy()
    mean, std = list(job.mean), list(job.std)
    if x.shape[0] == 1:  # a greyscale model: show its one channel as grey
        x = x.repeat(3, axis=0)
        mean, std = mean * 3, std * 3
    return input_view(x, mean, std)


def thumbnail_path(folder: PurePosixPath) -> PurePosixPath:
    """Where the picture of what the model saw goes, for the report."""
    return folder / "input.png"


def _draw_layer(job: ImageJob, order: int, cap: Capture, filename: str) -> LayerResult:
    from actviz import output
    from actviz.layouts import to_drawable
    from actviz.render import grid as render

    opts = job.options
    assert cap.tensor is not None  # the pipeline records tensors
    sample = cap.tensor[job.index]
    shape = (1, *sample.shape)
    lo, hi, mean = job.summaries[order][job.index]
    stats = None
    if cap.summary is not None:  # computed in the hook, on the device
        stats = cap.summary[job.index]
    elif job.stats_fn is not None:
        computed = job.stats_fn(cap.module, cap.tensor[job.index : job.index + 1])
        stats = computed[0] if computed else None
    if stats is not None:  # computed on the device already, finite-only like the summary
        lo, hi, mean = stats.min, stats.max, stats.mean
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
    drawable = to_drawable(sample.numpy(), job.contexts.get(cap.module), layout=opts.layout)
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
    if drawable.note:
        title += f"   ({drawable.note})"
    if drawable.kind == "vector":
        grid = render.render_vector(drawable.array, title=title, cmap=opts.cmap)
    else:
        shared = opts.norm == "shared"
        grid = render.render_grid(
            drawable.array,
            title=title,
            max_channels=opts.max_channels,
            order=opts.order,
            norm="channel" if opts.norm == "channel" else "layer",
            value_range=job.ranges.get(cap.key) if shared else None,
            clip=opts.clip,
            cmap=opts.cmap,
        )
    rel = job.folder / filename
    output.write_png(job.out_dir / rel, grid.to_pil(), compress_level=opts.png_compression)
    overlay_file = None
    if opts.overlay and drawable.kind == "maps":
        overlay_file = _write_overlay(job, drawable.array, stem)
    gradient, gradient_file, cam_file = _draw_gradient(job, cap, stem, title)
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
    )


def _draw_gradient(
    job: ImageJob, cap: Capture, stem: str, title: str
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """The gradient grid and the Grad-CAM overlay of one layer, when they were asked for."""
    import numpy as np
    from PIL import Image

    from actviz import output
    from actviz.layouts import to_drawable
    from actviz.render import grid as render

    captured = job.gradients.get(cap.key)
    if captured is None:
        return None, None, None
    opts = job.options
    ctx = job.contexts.get(cap.module)
    grad = captured.gradient[job.index]
    finite = grad[grad.isfinite()]
    info = {
        "norm": _json_number(captured.norms[job.index]),
        "min": _json_number(float(finite.min())) if finite.numel() else None,
        "max": _json_number(float(finite.max())) if finite.numel() else None,
        "mean": _json_number(float(finite.mean())) if finite.numel() else None,
        "target": job.target,
        "note": captured.note,
    }
    grad_maps = to_drawable(grad.numpy(), ctx, layout=opts.layout)
    gradient_file = None
    if job.gradient_grids and grad_maps.kind == "maps" and grad_maps.array is not None:
        # Gradients are heavy-tailed: one scale per layer, clipped, diverging around 0.
        picture = render.render_grid(
            grad_maps.array,
            title=f"{title}   gradient of logit {job.target}",
            max_channels=opts.max_channels,
            order=opts.order,
            norm="layer",
            clip=opts.clip or (1.0, 99.0),
        )
        rel = job.folder / f"{stem}_grad.png"
        output.write_png(job.out_dir / rel, picture.to_pil(), compress_level=opts.png_compression)
        gradient_file = rel.as_posix()
    cam_file = None
    if (
        cap.key in job.cam_keys
        and job.model_input is not None
        and grad_maps.kind == "maps"
        and grad_maps.array is not None
    ):
        from actviz.gradients.cam import grad_cam
        from actviz.render.overlay import blend, cam_panel

        view = model_view(job)
        ranked = job.class_cams.get(cap.key)
        if ranked:
            pixels = cam_panel(view, [(c.caption, c.cam.numpy()) for c in ranked])
        else:
            acts = to_drawable(captured.activation[job.index].numpy(), ctx, layout=opts.layout)
            if acts.array is None:
                return info, gradient_file, None
            heat = grad_cam(acts.array, grad_maps.array).numpy()
            pixels = blend(view, heat, cmap="jet", alpha=0.5)
        rel = job.folder / f"{stem}_cam.png"
        output.write_png(job.out_dir / rel, Image.fromarray(np.asarray(pixels)), compress_level=1)
        cam_file = rel.as_posix()
    return info, gradient_file, cam_file


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _write_overlay(job: ImageJob, maps: np.ndarray, stem: str) -> str | None:
    """The layer's mean map (or one channel) blended over what the model saw."""
    import numpy as np
    from PIL import Image

    from actviz import output
    from actviz.render.overlay import blend

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
    view = model_view(job)
    rel = job.folder / f"{stem}_overlay.png"
    picture = Image.fromarray(blend(view, heat, cmap="inferno", alpha=0.55))
    output.write_png(job.out_dir / rel, picture, compress_level=job.options.png_compression)
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
