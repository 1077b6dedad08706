"""Drawing one image's captured layers: each layer's record, then its pictures of every kind
(:data:`~actviz.run.pictures.PICTURE_KINDS`), its raw tensor, and the image's own pictures of
every kind (:data:`~actviz.run.families.IMAGE_KINDS`: what the model saw, a segmentation
model's class map, a detector's detections, a flow model's iterations).

Runs in the render threads: everything here works on CPU copies of one batch and writes
through ``output`` only.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.results import LayerResult
from actviz.run.families import IMAGE_KINDS, ImageKind
from actviz.run.job import ImageJob
from actviz.run.pictures import PICTURE_KINDS
from actviz.run.record import LayerView, layer_record, layer_view, summaries

if TYPE_CHECKING:
    from actviz.hooks import Capture

__all__ = ["draw_image", "layer_records", "summaries"]


def draw_image(job: ImageJob) -> list[LayerResult]:
    """Draw and write every capture of one image of a batch, then the image's own pictures:
    its layers' records, with the files."""

    layers = [_draw_layer(view, order) for order, view in _views(job)]
    for kind in IMAGE_KINDS:
        if kind.wanted(job):
            _draw_kind(job, kind)
    return layers


def _draw_kind(job: ImageJob, kind: ImageKind) -> None:
    """One per-image picture of the image (and its tensor, with ``save_tensors``)."""
    png = kind.make(job)
    if png is None:
        return
    output.write_bytes(job.out_dir / job.folder / f"{kind.name}.png", png)
    fmt = job.options.save_tensors
    if fmt is not None and kind.tensor is not None:
        output.write_tensor(job.out_dir / job.folder / f"{kind.name}.{fmt}", kind.tensor(job), fmt)


def layer_records(job: ImageJob) -> list[LayerResult]:
    """Every capture's record of one image, without drawing or writing anything."""
    return [layer_record(view, order) for order, view in _views(job)]


def _views(job: ImageJob) -> list[tuple[int, LayerView]]:

    captures: list[Capture] = list(job.captures)
    width = output.order_width(len(captures))
    return [
        (order, layer_view(job, cap, output.layer_filename(order, cap.key, width=width)))
        for order, cap in enumerate(captures)
    ]


def _draw_layer(view: LayerView, order: int) -> LayerResult:
    """One layer's record, its raw tensor, and its pictures: the grid, then the other kinds
    for a layer whose grid was drawn."""

    job, opts = view.job, view.job.options
    record = layer_record(view, order)
    if opts.save_tensors is not None:
        assert view.cap.tensor is not None
        rel = job.folder / f"{view.stem}.{opts.save_tensors}"
        output.write_tensor(job.out_dir / rel, view.cap.tensor[job.index], opts.save_tensors)
        record = dataclasses.replace(record, tensor_file=rel.as_posix())
    gridded = opts.grids and view.drawable.kind != "none" and view.drawable.array is not None
    pictures: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for kind in PICTURE_KINDS:
        if kind.with_grid and not gridded:
            continue
        drawn = kind.make(view)
        if drawn is None:
            continue
        fields.update(drawn.fields)
        if drawn.png is not None:
            rel = job.folder / f"{view.stem}{kind.suffix}.png"
            output.write_bytes(job.out_dir / rel, drawn.png)
            pictures[kind.name] = rel.as_posix()
    if not pictures and not fields:
        return record
    return dataclasses.replace(record, file=pictures.get("grid"), pictures=pictures, **fields)
