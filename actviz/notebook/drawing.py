"""The pictures of a :class:`~actviz.notebook.inline.Look` (given as ``look``): a run's drawing job
for one image, built in memory, handed to the run's picture makers; and a histogram of a
layer's values."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.command.session import restoring
from actviz.gradients import backward
from actviz.render.png import picture_png
from actviz.run.draw import summaries
from actviz.run.gradients import cam_picture
from actviz.run.job import ImageJob, headed, header_notes
from actviz.run.pca import PcaSampler, spatial_maps
from actviz.run.pictures import grid_picture, pca_picture
from actviz.run.record import layer_view

if TYPE_CHECKING:
    from actviz.hooks import Capture
    from actviz.run.job import ImageJob

__all__ = ["draw_picture", "histogram_png", "image_job"]

_BINS = 64
_HIST_SIZE = (384, 140)  # (width, height) of the bars


def image_job(look: Any, cap: Capture, **fields: Any) -> ImageJob:
    """The job a run's render thread would get for this image and capture."""

    loaded = look.loaded
    assert cap.tensor is not None
    return ImageJob(
        captures=[cap],
        summaries=[summaries(cap.tensor)],
        index=0,
        folder=PurePosixPath("."),
        out_dir=Path("."),
        options=look.options,
        contexts=look.contexts,
        model_input=look.x,
        mean=loaded.preprocess.mean,
        std=loaded.preprocess.std,
        random_weights=loaded.weights.random,
        channel_names=loaded.channel_names,
        **fields,
    )


def draw_picture(look: Any, cap: Capture, kind: str) -> bytes | None:
    """PNG bytes of one picture of one capture; None when the layer has none of that kind."""

    if kind == "hist":
        return histogram_png(look, cap)
    fields: dict[str, Any] = {}
    if kind == "cam":
        fields = _cam_fields(look, cap)
        if not fields:
            return None
    elif kind == "pca":
        fit = _pca_fit(look, cap)
        if fit is None:
            return None
        fields = {"pca": {cap.key: fit}}
    view = layer_view(image_job(look, cap, **fields), cap, "00_layer.png")
    maker = {"grid": grid_picture, "cam": cam_picture, "pca": pca_picture}[kind]
    drawn = maker(view)
    return None if drawn is None else drawn.png


def _cam_fields(look: Any, cap: Capture) -> dict[str, Any]:
    """The backward pass of the image for one layer's Grad-CAM, as the run makes it."""

    loaded = look.loaded
    if not loaded.classifier:
        return {}
    keys = frozenset({cap.key})
    with restoring(loaded.module):
        gradients, targets, class_maps = backward(
            loaded.module,
            look.x[None].to(loaded.device),
            [cap.module],
            target=look.target,
            categories=loaded.categories,
            cam_keys=keys,
            cam_classes=1,
            contexts=look.contexts,
        )
    if cap.key not in gradients:
        return {}
    target = targets[0] if targets else None
    names = loaded.categories or []
    return {
        "gradients": gradients,
        "target": target,
        "target_label": names[target] if target is not None and target < len(names) else None,
        "cam_keys": keys,
        "class_cams": {key: maps[0] for key, maps in class_maps.items()},
    }


def _pca_fit(look: Any, cap: Capture) -> Any:
    """The layer's components fitted on this one image (a run fits them over all its
    images); None for an output without positions."""

    assert cap.tensor is not None
    ctx = look.contexts.get(cap.module)
    maps, _ = spatial_maps(cap.tensor[0], ctx, look.options.layout)
    if maps is None:
        return None
    sampler = PcaSampler(1)
    sampler.add(cap.key, 0, maps)
    return sampler.fits().get(cap.key)


def histogram_png(look: Any, cap: Capture) -> bytes:
    """The layer's values as a histogram, under the header the run's pictures have."""

    from actviz.render.legend import HEADER_MIN_WIDTH, Header, fmt_value

    assert cap.tensor is not None
    values = cap.tensor.numpy().ravel()
    finite = values[np.isfinite(values)]
    bad = int(values.size - finite.size)
    width, height = _HIST_SIZE
    # As wide as the header, the bars centred in it.
    pixels = np.full((height, max(width, HEADER_MIN_WIDTH), 3), 255, np.uint8)
    left = (pixels.shape[1] - width) // 2
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 0.0
    if finite.size:
        counts, _ = np.histogram(finite, bins=_BINS, range=(lo, hi if hi > lo else lo + 1.0))
        tops = np.sqrt(counts / max(int(counts.max()), 1))  # square root: the tails show
        bar = width // _BINS
        for i, top in enumerate(tops):
            rows = int(round(float(top) * (height - 2)))
            if rows:
                pixels[height - rows :, left + i * bar : left + (i + 1) * bar - 1] = (48, 96, 160)
        if lo < 0 < hi:  # where zero is
            zero = int((0 - lo) / (hi - lo) * _BINS * bar)
            pixels[:, left + min(zero, width - 1)] = (200, 60, 60)
    zeros = float((finite == 0).mean()) if finite.size else 0.0
    job = image_job(look, cap)
    header = Header(
        title=f"{cap.key}   {cap.module_type}   {tuple(cap.shape)}   histogram",
        info=(
            f"{finite.size:,} values  |  range [{fmt_value(lo)}, {fmt_value(hi)}]  |  "
            f"zeros {zeros:.1%}  |  square-root counts"
            + (f"  |  {bad:,} NaN/Inf left out" if bad else "")
        ),
        labels=(fmt_value(lo), fmt_value(hi)),
        nonfinite=bad > 0,
        notes=tuple(header_notes(job)),
    )
    return picture_png(headed(pixels, header, "viridis"), 6)
