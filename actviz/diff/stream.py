"""Streaming a diff: every image through both models (each hooked on the same layers, one
forward of each per batch), the running sums updated per batch, and the pictures of the first
images drawn once their shared scale is known.

Nothing is kept across batches but the sums of :class:`~actviz.diff.metrics.LayerComparison`
and the per-layer :class:`~actviz.diff.pictures.PictureScale`. The pictured images are drawn
from the batch that holds them all; when they span several batches, they alone go through the
models a second time, after the stream, instead of being buffered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.forward import BatchForward
from actviz.command.progress import Reporter
from actviz.diff.metrics import LayerComparison, cosine_similarity, hold_back, relative_l2
from actviz.diff.options import DiffOptions
from actviz.diff.pictures import PictureScale, caption_lines, compose, render_diff
from actviz.diff.result import DiffPicture, ModelSide
from actviz.errors import UsageError
from actviz.hooks import ActivationRecorder, eval_mode
from actviz.layouts import layer_contexts, plan_layout, to_drawable
from actviz.render.png import picture_png
from actviz.results import ImageResult

if TYPE_CHECKING:
    import torch

    from actviz.hooks import Capture
    from actviz.models import LoadedModel

__all__ = ["PICTURES_DIR", "Stream", "side", "stream"]

#: The folder of the difference pictures: a diff writing into a run's folder never touches
#: the run's grids (``<image>/<NN>_<layer>.png``).
PICTURES_DIR = "diff"


@dataclass
class Stream:
    """What streaming the images accumulates."""

    opts: DiffOptions
    a: LoadedModel
    b: LoadedModel
    names: list[str]
    results: list[ImageResult]
    order: list[str] = field(default_factory=list)
    info: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...] | None]] = field(
        default_factory=dict
    )
    comparisons: dict[str, LayerComparison] = field(default_factory=dict)
    scales: dict[str, PictureScale] = field(default_factory=dict)
    pictures: list[DiffPicture] = field(default_factory=list)
    pictured: list[int] = field(default_factory=list)
    never_ran: set[str] = field(default_factory=set)
    resized: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)
    """Capture key -> the other per-image shapes its maps had, pooled to the compared one."""
    failed: list[ImageResult] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """Capture key -> why its rows cannot be attributed to images (it is not compared)."""
    contexts_a: dict[str, Any] = field(default_factory=dict)
    contexts_b: dict[str, Any] = field(default_factory=dict)

    @property
    def two_images(self) -> bool:
        return not self.opts.compares_models


@dataclass
class _Batch:
    """One batch as pairs: per capture key, A's rows and B's rows (the same images)."""

    rows: list[int]  # index into the results of each row (for two images: the first image)
    pairs: list[tuple[Capture, torch.Tensor, torch.Tensor | None]]
    remaining: int  # images still to come after this batch


def stream(state: Stream, notify: Reporter) -> None:
    """Every image through both models, the running sums updated per batch; pictures of the
    first images drawn as soon as their scale is known (or in a second pass over just them)."""

    state.contexts_a = layer_contexts(state.a.module, state.a.input_size)
    state.contexts_b = (
        state.contexts_a
        if state.b is state.a
        else layer_contexts(state.b.module, state.b.input_size)
    )
    paths = [r.path for r in state.results]
    want = 1 if state.two_images else min(state.opts.images, len(paths))
    want = want if state.opts.images > 0 else 0
    drawn = False
    for batch in _batches(state, paths, notify):
        first = state.results[batch.rows[0]].path
        for cap, tensor_a, tensor_b in batch.pairs:
            _measure(state, cap, tensor_a, tensor_b, batch.remaining, first)
        new = list(range(min(max(0, want - len(state.pictured)), len(batch.rows))))
        for i in new:
            state.pictured.append(batch.rows[i])
            for cap, tensor_a, tensor_b in batch.pairs:
                _scale(state, cap, tensor_a, tensor_b, i)
        if want and len(new) == want:
            # Every pictured image is in this batch: draw now, nothing to keep.
            _draw(state, batch, new)
            drawn = True
    if want and not drawn and state.pictured:
        # The pictured images spanned several batches: their scales are known now, so run
        # just them through again and draw (a second pass over a few images, not a buffer).
        everything = state.results
        state.results = [everything[i] for i in state.pictured]
        try:
            for batch in _batches(state, [r.path for r in state.results], None):
                _draw(state, batch, list(range(len(batch.rows))))
        finally:
            state.results = everything


def _batches(state: Stream, paths: list[Path], notify: Reporter | None) -> Iterator[_Batch]:
    """Decode, batch, run A (and B on the same input); yield each batch's pairs."""

    opts, a, b = state.opts, state.a, state.b
    ex = opts.execution
    batch_size = max(2, ex.batch_size) if state.two_images else ex.batch_size
    # Model B, when there is one, runs on each batch right after A, on the same input.
    model_b = b if b is not a else None
    forward = BatchForward(a, a.module, replace(ex, batch_size=batch_size), second=model_b)

    def failed(index: int, error: str | None) -> None:
        result = state.results[index]
        result.status, result.error = "failed", error
        state.failed.append(result)
        if notify is not None:
            notify.advance(result)

    # Two images of different input shapes come in two batches: the first one's captures
    # wait here for the second's.
    held: list[tuple[Capture, torch.Tensor]] | None = None
    with contextlib.ExitStack() as stack:
        rec_a = stack.enter_context(ActivationRecorder(a.module, state.names, per_image=True))
        stack.enter_context(eval_mode(a.module))
        rec_b = None
        if model_b is not None:
            rec_b = stack.enter_context(
                ActivationRecorder(model_b.module, state.names, per_image=True)
            )
            stack.enter_context(eval_mode(model_b.module))
        for good, _logits, _x in forward.batches(paths, stack, failed):
            state.never_ran.update(rec_a.never_called())
            caps_b: dict[str, torch.Tensor] = {}
            if rec_b is not None:
                state.never_ran.update(rec_b.never_called())
                caps_b = {key: rec_b[key] for key in rec_b}
            rows = [index for index, _, _ in good]
            for index, size, _x in good:
                state.results[index].size = size
            remaining = len(paths) - rows[-1] - 1
            pairs: list[tuple[Capture, torch.Tensor, torch.Tensor | None]] = []
            for cap in rec_a.captures:
                tensor = rec_a[cap.key]
                if rec_b is not None:
                    pairs.append((cap, tensor, caps_b.get(cap.key)))
                elif tensor.shape[0] == 2:  # two images: A is the first row, B the second
                    pairs.append((cap, tensor[0:1], tensor[1:2]))
            if rec_b is None and len(rows) == 1:
                if held is None and rows[0] == 0:
                    held = [(cap, rec_a[cap.key].clone()) for cap in rec_a.captures]
                    rows = []
                elif held is not None:
                    second = {cap.key: rec_a[cap.key] for cap in rec_a.captures}
                    pairs = [
                        (cap, first, _at_size(state, cap, second[cap.key], first, paths[rows[0]]))
                        for cap, first in held
                        if cap.key in second
                    ]
                    rows = [0]
                else:
                    rows = []
            elif rec_b is None:
                rows = rows[:1] if len(rows) == 2 else []
            if rows:
                yield _Batch(rows, pairs, remaining)
            if notify is not None:
                for index in [index for index, _, _ in good]:
                    notify.advance(state.results[index])


def _measure(
    state: Stream,
    cap: Capture,
    tensor_a: torch.Tensor,
    tensor_b: torch.Tensor | None,
    remaining: int,
    path: Path,
) -> None:
    """Add one batch of one layer to its running sums (``path``: its first image)."""
    key = cap.key
    if key not in state.comparisons:
        state.order.append(key)
        state.comparisons[key] = LayerComparison(cka=not state.two_images)
        shape_b = tuple(tensor_b.shape[1:]) if tensor_b is not None else None
        state.info[key] = (cap.module, cap.module_type, tuple(tensor_a.shape[1:]), shape_b)
    if tensor_b is None:
        return
    if cap.refused is not None:  # rows that are not the images: nothing to compare per image
        state.refused[key] = cap.refused
        return
    compared = state.info[key][2]
    if tuple(tensor_a.shape[1:]) != compared:
        # The preprocessing keeps each image's aspect ratio (no crop): the maps of this
        # batch are compared at the size of the first image's, so the sums can add up.
        tensor_a = _at_size(state, cap, tensor_a, compared, path)
        tensor_b = _at_size(state, cap, tensor_b, compared, path)
    state.comparisons[key].add(tensor_a.numpy(), tensor_b.numpy(), hold=hold_back(remaining))


def _at_size(
    state: Stream,
    cap: Capture,
    tensor: torch.Tensor,
    target: torch.Tensor | tuple[int, ...],
    path: Path,
) -> torch.Tensor:
    """A batch of one layer's maps brought to another per-image shape (``target``, or the
    shape of its rows) by adaptive average pooling over the spatial axes; recorded in
    ``state.resized``.

    Raises:
        UsageError: When the shapes differ in more than the map size (tokens, channels), so
            that they cannot be compared; the fix is one input size for every image.
    """
    import torch.nn.functional as F

    shape = tuple(target.shape[1:]) if not isinstance(target, tuple) else target
    have = tuple(tensor.shape[1:])
    if have == shape:
        return tensor
    differ = {i for i, (m, n) in enumerate(zip(have, shape, strict=False)) if m != n}
    layout = plan_layout(shape, state.contexts_a.get(cap.module)).layout
    if len(have) == len(shape) == 3 and differ <= {1, 2} and layout != "nhwc":
        pooled = F.adaptive_avg_pool2d(tensor.float(), shape[1:])
    elif len(have) == len(shape) == 3 and differ <= {0, 1}:
        channels_first = tensor.float().permute(0, 3, 1, 2)
        pooled = F.adaptive_avg_pool2d(channels_first, shape[:2]).permute(0, 2, 3, 1)
    else:
        raise UsageError(
            f"layer {cap.key} gives {have} per image for some images and {shape} for others "
            f"(e.g. {path.name}): the model's preprocessing keeps each image's aspect ratio "
            "and these outputs cannot be brought to one size; pass --input-size H,W so that "
            "every image is cropped to one size"
        )
    state.resized.setdefault(cap.key, set()).add(have)
    return pooled.contiguous()


def _drawables(
    state: Stream, cap: Capture, tensor_a: torch.Tensor, tensor_b: torch.Tensor | None, row: int
) -> tuple[Any, Any] | None:
    """A's and B's drawable arrays of one row, or None when they cannot be drawn side by side."""

    if tensor_b is None or tensor_a.shape != tensor_b.shape:
        return None
    da = to_drawable(tensor_a[row].numpy(), state.contexts_a.get(cap.module))
    db = to_drawable(tensor_b[row].numpy(), state.contexts_b.get(cap.module))
    if da.array is None or db.array is None or da.kind != db.kind or da.layout != db.layout:
        return None
    if da.array.shape != db.array.shape:
        return None
    return da, db


def _scale(
    state: Stream, cap: Capture, tensor_a: torch.Tensor, tensor_b: torch.Tensor | None, row: int
) -> None:
    """Measure one pictured image of one layer for the layer's shared scale."""
    pair = _drawables(state, cap, tensor_a, tensor_b, row)
    if pair is not None:
        state.scales.setdefault(cap.key, PictureScale()).update(pair[0].array, pair[1].array)


def _draw(state: Stream, batch: _Batch, rows: list[int]) -> None:
    """Write the difference pictures of the given rows of a batch."""

    opts = state.opts
    width = output.order_width(len(state.order))
    position = {key: i for i, key in enumerate(state.order)}
    for i in rows:
        result = state.results[batch.rows[i]]
        if state.two_images:
            first, second = state.results[0], state.results[1]
            image = f"{first.path.name} vs {second.path.name}"
            folder = output.safe_name(f"{first.out_dir.name}_vs_{second.out_dir.name}")
            titles = (f"A  {first.path.name}", f"B  {second.path.name}")
        else:
            image, folder = str(result.path), result.out_dir.as_posix()
            titles = (f"A  {side(state.a).label}", f"B  {side(state.b).label}")
        for cap, tensor_a, tensor_b in batch.pairs:
            scale = state.scales.get(cap.key)
            pair = _drawables(state, cap, tensor_a, tensor_b, i)
            if scale is None or pair is None or cap.key not in position:
                continue
            da, db = pair
            shape = tuple(tensor_a.shape[1:])
            what = f"{cap.key}   {cap.module_type}   {shape}"
            note = f"   ({da.note})" if da.note else ""
            panels = render_diff(
                da.array,
                db.array,
                titles=(f"{titles[0]}   {what}{note}", f"{titles[1]}   {what}", f"B - A   {what}"),
                scale=scale,
                max_channels=opts.max_channels,
            )
            assert tensor_b is not None  # _drawables checked
            row_a = tensor_a[i : i + 1].reshape(1, -1).double().numpy()
            row_b = tensor_b[i : i + 1].reshape(1, -1).double().numpy()
            caption = caption_lines(
                cap.key,
                image,
                panels,
                cosine=float(cosine_similarity(row_a, row_b)[0]),
                rel_l2=float(relative_l2(row_a, row_b)[0]),
                scope=(
                    "for this pair"
                    if state.two_images
                    else f"over the {scale.images} pictured image{'s' if scale.images != 1 else ''}"
                ),
            )
            picture, boxes = compose(panels, caption)
            name = output.layer_filename(position[cap.key], cap.key, width=width)
            rel = f"{PICTURES_DIR}/{folder}/{name}"
            output.write_bytes(opts.out / rel, picture_png(picture, opts.png_compression))
            state.pictures.append(
                DiffPicture(
                    image=image,
                    layer=cap.key,
                    file=rel,
                    channels=panels.channels,
                    channels_total=panels.channels_total,
                    panels={"a": boxes[0], "b": boxes[1], "diff": boxes[2]},
                    diff_range=scale.diff_range[1],
                    size=picture.size,
                )
            )


def side(loaded: LoadedModel) -> ModelSide:
    return ModelSide(loaded.name, loaded.weights, info=loaded.record())
