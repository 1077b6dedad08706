"""One layer of one image: the view every picture maker draws from, what a maker gives back,
and the layer's record (shape, range, statistics, layout, note), built without drawing."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.layouts import Drawable, to_drawable
from actviz.results import LayerResult
from actviz.run.job import ImageJob

if TYPE_CHECKING:
    import torch

    from actviz.hooks import Capture
    from actviz.layouts import Drawable

__all__ = ["Drawn", "LayerView", "layer_record", "layer_view", "summaries"]


@dataclass(frozen=True)
class LayerView:
    """One captured layer of one image, as the picture makers see it.

    Attributes:
        job: The image's job (its captures, options, what the model saw).
        cap: The layer's capture, for the whole batch.
        drawable: The image's slice of the output, ready to draw (or why it cannot be).
        stem: The layer's file name without extension (``03_layer1.0.conv1``).
        title: The first header line of its pictures.
    """

    job: ImageJob
    cap: Capture
    drawable: Drawable
    stem: str
    title: str


@dataclass(frozen=True)
class Drawn:
    """What a picture maker made of one layer.

    Attributes:
        png: The picture as PNG bytes; None when there is nothing to show, though ``fields``
            may still say why.
        fields: What it adds to the layer's record (:class:`~actviz.results.LayerResult`
            field names: the grid's channels, the gradient's figures, the CAM's note).
    """

    png: bytes | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)


def layer_view(job: ImageJob, cap: Capture, filename: str) -> LayerView:
    """The view of capture ``cap`` for image ``job.index``; ``filename`` is its grid's."""

    assert cap.tensor is not None  # the pipeline records tensors
    stem = filename.removesuffix(".png")
    if cap.refused is not None:  # rows that are not the images: nothing of it is this image's
        drawable = Drawable("none", None, "none", cap.refused)
        return LayerView(job, cap, drawable, stem, f"{cap.key}   {cap.module_type}")
    sample = cap.tensor[job.index]
    # Attention maps are (heads, H, W) whatever the module's own output looks like.
    ctx = None if cap.kind == "attention" else job.contexts.get(cap.module)
    drawable = to_drawable(sample.numpy(), ctx, layout=job.options.layout)
    if cap.key in job.features:
        drawable = feature_drawable(drawable, job.features[cap.key])
    if cap.rows is not None:  # windows put back into the image's grid: the note says so
        note = f"{cap.rows}; {drawable.note}" if drawable.note else cap.rows
        drawable = dataclasses.replace(drawable, note=note)
    title = f"{cap.key}   {cap.module_type}   {(1, *sample.shape)}"
    if drawable.layout == "features" and drawable.array is not None:
        title += f" -> {drawable.array.shape[0]} dictionary features"
    return LayerView(job, cap, drawable, stem, title)


def feature_drawable(drawable: Drawable, dictionary: Any) -> Drawable:
    """``--sae``: the layer's ``(C, H, W)`` maps as the dictionary's ``(F, H, W)`` feature
    maps, each position encoded on its own."""
    import torch

    array = drawable.array
    if array is None or drawable.kind == "none":
        return drawable
    maps = array.reshape(-1, 1, 1) if drawable.kind == "vector" else array
    if maps.shape[0] != dictionary.channels:
        return Drawable("none", None, "none", f"--sae expects {dictionary.channels} channels here")
    with torch.no_grad():
        features = dictionary.encode_maps(torch.from_numpy(maps.copy())[None])[0].numpy()
    note = f"features of a sparse dictionary (k {dictionary.k}) over {dictionary.channels} channels"
    return Drawable("maps", features.astype("float32"), "features", note)


def layer_record(view: LayerView, order: int) -> LayerResult:
    """The layer's record without pictures: what it is, its range and statistics (computed
    here unless the hook did), how it is laid out, and why it cannot be drawn, if so."""
    job, cap = view.job, view.cap
    assert cap.tensor is not None
    shape = (1, *cap.tensor.shape[1:])
    stats = None
    if cap.refused is not None:  # no row is this image's: no figures, the note says why
        shape = (1, *cap.shape[1:])  # one row's, as for any layer; the note says what rows are
        lo = hi = mean = math.nan
    else:
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
    return LayerResult(
        key=cap.key,
        module=cap.module,
        module_type=cap.module_type,
        call=cap.call,
        shape=shape,
        min=lo,
        max=hi,
        mean=mean,
        kind=cap.kind,
        stats=stats.to_dict() if stats is not None else None,
        channels_shown=0,
        channels_total=0,
        file=None,
        layout=view.drawable.layout,
        note=view.drawable.note,
    )


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
