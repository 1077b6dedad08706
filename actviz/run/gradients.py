"""A run's gradient pictures: a layer's gradient grid and its Grad-CAM picture (the input beside
each class's map, under a header with the layer, the class, its probability and a colour bar),
and the gradient-flow charts of each image and of the run.

Picture makers (:data:`actviz.run.pictures.PICTURE_KINDS`), called per layer in the render
threads with the gradients the backward pass recorded; the flow charts are written through
``output`` when the images are done.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.command.session import RANDOM_NOTE
from actviz.gradients.cam import grad_cam
from actviz.gradients.core import zero_cam_note
from actviz.gradients.registry import DEFAULT_CAM, MAP_METHODS, cam_title
from actviz.layouts import to_drawable
from actviz.render import Header, cam_panel, render_grid
from actviz.render.png import picture_png
from actviz.render.timestrips import render_time_strips
from actviz.results import ImageResult
from actviz.run.clipcam import clip_cam_picture
from actviz.run.job import ImageJob, display_view, headed, header_notes
from actviz.run.record import Drawn, LayerView

if TYPE_CHECKING:
    from actviz.hooks import Capture
    from actviz.layouts import Drawable

__all__ = [
    "RunGradientFlow",
    "cam_picture",
    "class_name",
    "gradient_picture",
    "write_gradient_flow",
]


def class_name(index: int | None, label: str | None) -> str:
    """``"class 281 (tabby)"``, or ``"class 281"`` without a name."""
    return f"class {index} ({label})" if label is not None else f"class {index}"


def gradient_picture(view: LayerView) -> Drawn | None:
    """The layer's gradient grid (with ``--grads``), and the gradient's figures for the
    record whenever a gradient was taken for it (also for Grad-CAM alone)."""
    job, cap = view.job, view.cap
    captured = job.gradients.get(cap.key)
    if captured is None:
        return None
    info, grad_maps = _gradient(job, cap, captured)
    drawable = grad_maps.kind in ("maps", "clip") and grad_maps.array is not None
    if not (job.gradient_grids and drawable and grad_maps.array is not None):
        return Drawn(None, {"gradient": info})
    opts = job.options
    zero_note = None
    if info["zero"]:
        zero_note = "the gradient is all zero" + (f": {captured.note}" if captured.note else "")
    title = f"{view.title}   gradient of the logit of {class_name(job.target, job.target_label)}"
    if grad_maps.kind == "clip":  # a video layer's gradient: time strips on one scale
        strips = render_time_strips(
            grad_maps.array,
            title=title,
            max_channels=min(opts.max_channels, 16) if opts.max_channels > 0 else 16,
            order=opts.order,
            norm="layer",
            clip=opts.clip or (1.0, 99.0),
            notes=header_notes(job, grad_maps.note, zero_note),
        )
        return Drawn(strips.to_png(opts.png_compression), {"gradient": info})
    # Gradients are heavy-tailed: one scale per layer, clipped, diverging around 0.
    picture = render_grid(
        grad_maps.array,
        title=title,
        max_channels=opts.max_channels,
        order=opts.order,
        norm="layer",
        clip=opts.clip or (1.0, 99.0),
        notes=header_notes(job, grad_maps.note, zero_note),
    )
    return Drawn(picture.to_png(opts.png_compression), {"gradient": info})


def _gradient(job: ImageJob, cap: Capture, captured: Any) -> tuple[dict[str, Any], Drawable]:
    """The gradient's figures for the record, and its image's slice ready to draw."""

    ctx = job.contexts.get(cap.module)
    grad = captured.gradient[job.index]
    finite = grad[grad.isfinite()]
    grad_maps = to_drawable(grad.numpy(), ctx, layout=job.options.layout)
    # All zero where it is drawn: for a token layer, the patch tokens.
    drawn = grad_maps.array if grad_maps.array is not None else grad.numpy()
    zero = not bool(np.any(drawn))
    info = {
        "norm": _json_number(captured.norms[job.index]),
        "min": _json_number(float(finite.min())) if finite.numel() else None,
        "max": _json_number(float(finite.max())) if finite.numel() else None,
        "mean": _json_number(float(finite.mean())) if finite.numel() else None,
        "target": job.target,
        "target_label": job.target_label,
        "zero": zero,
        "note": captured.note if zero else None,
    }
    return info, grad_maps


def cam_picture(view: LayerView) -> Drawn | None:
    """The Grad-CAM picture of one layer: the input and each class's map beside it, under a
    header naming the layer, the classes and their probabilities, with a colour bar; and why
    a map is all zero, for the record."""

    job, cap = view.job, view.cap
    captured = job.gradients.get(cap.key)
    if captured is None or cap.key not in job.cam_keys or job.model_input is None:
        return None
    _, grad_maps = _gradient(job, cap, captured)
    if grad_maps.kind == "clip" and grad_maps.array is not None:  # a video layer: per frame
        clip = view.drawable.array
        if clip is None:
            return None
        name = class_name(job.target, job.target_label)
        return clip_cam_picture(job, cap, clip, grad_maps.array, name)
    if grad_maps.kind != "maps" or grad_maps.array is None:
        return None
    ranked = job.class_cams.get(cap.key)
    method = ranked[0].method if ranked else DEFAULT_CAM
    title = cam_title(method)
    if ranked:
        panels = [(c.caption, c.cam.numpy()) for c in ranked]
        zeros = [(c.name, c.note or zero_cam_note(None)) for c in ranked if not c.cam.any()]
        first = ranked[0]
        row = MAP_METHODS[method]
        if not row.class_specific:  # one map whatever the class: the class is only context
            panels = [(f"{title}, any class", first.cam.numpy())]
            what = (
                f"class-agnostic ({row.about})  |  the model's "
                f"top class: {class_name(first.index, first.label)} {first.probability:.1%}"
            )
        elif len(ranked) == 1:
            what = f"{class_name(first.index, first.label)}  |  probability {first.probability:.1%}"
        else:
            what = f"top {len(ranked)} classes, most likely first"
    else:  # a layout the class maps cannot read: from the drawn maps
        ctx = job.contexts.get(cap.module)
        acts = to_drawable(captured.activation[job.index].numpy(), ctx, layout=job.options.layout)
        if acts.array is None:
            return None
        heat = grad_cam(acts.array, grad_maps.array).numpy()
        name = class_name(job.target, job.target_label)
        panels = [(name, heat)]
        zeros = [(name, zero_cam_note(captured.note))] if not heat.any() else []
        what = name
    # One line when every map is blank for the same reason, else one per blank map.
    if len({reason for _, reason in zeros}) == 1 and len(zeros) == len(panels):
        cam_note = zeros[0][1]
        zero_lines = [f"the {title} map is all zero: {cam_note}"]
    else:
        cam_note = "; ".join(f"{name}: {reason}" for name, reason in zeros) or None
        zero_lines = [f"the {title} map of {name} is all zero: {reason}" for name, reason in zeros]
    header = Header(
        title=f"{cap.key}   {cap.module_type}   {title}",
        info=f"{what}  |  each map scaled to its maximum",
        labels=("0", "max"),
        nonfinite=False,
        notes=tuple(header_notes(job, *zero_lines)),
    )
    pixels = cam_panel(display_view(job), panels)
    fields = {"cam_note": cam_note, "cam_method": method}
    return Drawn(picture_png(headed(pixels, header, "jet")), fields)


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def write_gradient_flow(out_dir: Path, result: ImageResult, *, random: bool = False) -> str | None:
    """One image's gradient norm per layer against depth; ``random``: the model's weights
    are random, and the chart says so as every picture does."""
    from actviz.gradients.gradient_flow import gradient_flow_png

    layers = [layer for layer in result.layers if layer.gradient and layer.kind == "output"]
    if not layers:
        return None
    norms = [layer.gradient["norm"] if layer.gradient else None for layer in layers]
    png = gradient_flow_png(
        [layer.key for layer in layers],
        {result.out_dir.as_posix(): [math.nan if n is None else n for n in norms]},
        title=_titled(f"gradient flow: {result.path.name}", random),
        show_mean=False,
    )
    rel = result.out_dir / "gradient_flow.png"
    output.write_bytes(out_dir / rel, png)
    return rel.as_posix()


class RunGradientFlow:
    """The run's gradient flow, folded image by image: a sample of the images' norms to draw
    (the first :attr:`SAMPLE`), and the geometric mean of every image's, per layer."""

    SAMPLE = 100

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sample: dict[str, list[float]] = {}
        self.images = 0
        self._log_sum: list[float] = []
        self._positive: list[int] = []
        self._zero: list[int] = []

    def add(self, image: str, layers: Sequence[Mapping[str, Any]]) -> None:
        """One image's gradient norms, from its record's layers (nothing when it has none)."""
        taken = [x for x in layers if x.get("gradient") and x.get("kind", "output") == "output"]
        if not taken:
            return
        if not self.keys:
            self.keys = [x["name"] for x in taken]
            self._log_sum = [0.0] * len(self.keys)
            self._positive = [0] * len(self.keys)
            self._zero = [0] * len(self.keys)
        norms = {x["name"]: x["gradient"]["norm"] for x in taken}
        values = [math.nan if norms.get(k) is None else float(norms[k]) for k in self.keys]
        self.images += 1
        if len(self.sample) < self.SAMPLE:
            self.sample[image] = values
        for j, value in enumerate(values):
            if math.isfinite(value) and value > 0:
                self._log_sum[j] += math.log(value)
                self._positive[j] += 1
            else:
                self._zero[j] += 1

    def to_state(self) -> dict[str, Any]:
        """Everything folded so far as JSON-ready data, for :meth:`from_state`."""
        return {
            "keys": self.keys,
            "sample": list(self.sample.items()),
            "images": self.images,
            "log_sum": self._log_sum,
            "positive": self._positive,
            "zero": self._zero,
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> RunGradientFlow:
        """The flow :meth:`to_state` gave.

        Raises:
            KeyError, TypeError, ValueError: If ``data`` is not such a state.
        """
        flow = cls()
        flow.keys = [str(k) for k in data["keys"]]
        flow.sample = {str(image): [float(v) for v in values] for image, values in data["sample"]}
        flow.images = int(data["images"])
        flow._log_sum = [float(v) for v in data["log_sum"]]
        flow._positive = [int(n) for n in data["positive"]]
        flow._zero = [int(n) for n in data["zero"]]
        return flow

    def mean(self) -> list[float]:
        """The geometric mean of every image's nonzero norms, per layer."""
        return [
            math.exp(total / n) if n else math.nan
            for total, n in zip(self._log_sum, self._positive, strict=True)
        ]

    def describe(self) -> dict[str, Any] | None:
        """Per layer: images, the geometric mean of the nonzero norms, zero or non-finite
        norms; for ``stats.json`` (each image's are in its record)."""
        if not self.images:
            return None
        return {
            "images": self.images,
            "layers": [
                {"name": k, "norm_geomean": _json_number(m), "zero_or_nonfinite": z}
                for k, m, z in zip(self.keys, self.mean(), self._zero, strict=True)
            ],
        }

    def write(self, out_dir: Path, *, random: bool = False) -> Path | None:
        """``gradient_flow.png``: the sampled images and the mean of all."""
        from actviz.gradients.gradient_flow import gradient_flow_png

        if not self.sample:
            return None
        title = "gradient flow: the run"
        if self.images > len(self.sample):
            title += f" (the first {len(self.sample)} of {self.images} images drawn)"
        path = out_dir / "gradient_flow.png"
        png = gradient_flow_png(
            self.keys,
            self.sample,
            title=_titled(title, random),
            mean=(self.mean(), self.images) if self.images > 1 else None,
        )
        output.write_bytes(path, png)
        return path


def _titled(title: str, random: bool) -> str:

    return f"{title}\n{RANDOM_NOTE}" if random else title
