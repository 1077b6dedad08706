"""What a run is about to do: its layers, their contexts, each image's output folder, the
resume records, and which images are still to draw."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.errors import UsageError
from actviz.gradients.registry import DEFAULT_CAM
from actviz.hooks import ActivationRecorder
from actviz.layouts import layer_contexts, to_drawable
from actviz.models.listing import traced_input_shape
from actviz.results import ImageResult
from actviz.run.families import run_family
from actviz.run.records import RunRecords
from actviz.run.sink import RunSink
from actviz.statistics import Thresholds

if TYPE_CHECKING:
    from actviz.command.progress import Reporter
    from actviz.models import LoadedModel
    from actviz.run.options import RunOptions
    from actviz.statistics import Thresholds

__all__ = ["Plan", "plan"]


@dataclass
class Plan:
    """What a run is about to do: its layers, their contexts, and the images still to draw.

    Attributes:
        selector: The selector the layers came from.
        names: The modules to hook.
        module: The model, in the memory format the run uses.
        contexts: What the model's structure says about each module.
        results: Every image of the run, in order, as small stubs (reused ones marked).
        todo: The images still to process.
        sink: Where each finished image goes (:class:`actviz.run.sink.RunSink`).
        kept: Files ``--overwrite`` left in place because no run wrote them.
    """

    selector: str
    names: list[str]
    module: Any
    contexts: Mapping[str, Any]
    results: list[ImageResult]
    todo: list[ImageResult]
    sink: RunSink
    kept: list[str]
    pca: dict[str, Any] = field(default_factory=dict)
    """With ``--view pca``: capture key -> its components, fitted over every image."""
    pca_notes: dict[str, str] = field(default_factory=dict)
    """Capture key -> why it has no components (no spatial positions, ...)."""
    features: dict[str, Any] = field(default_factory=dict)
    """With ``--sae``: capture key -> the sparse dictionary drawn in its place."""


def plan(
    model: str,
    loaded: LoadedModel,
    selector: str,
    names: list[str],
    found: Any,
    opts: RunOptions,
    notify: Reporter,
) -> Plan:
    """Output folders per image, the resume records, and which images are still to draw."""

    module = loaded.module  # in the run's memory format already
    contexts = layer_contexts(module, loaded.input_size)
    _check_overlay_channel(opts, loaded, names, contexts)
    dirs = output.image_dirs([item.rel for item in found.images])
    results = [
        ImageResult(path=item.path, out_dir=folder)
        for item, folder in zip(found.images, dirs, strict=True)
    ]
    grads = opts.gradients
    settings: dict[str, Any] = {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "selector": selector,
        "capture": opts.capture,
        "draw": {k: v for k, v in opts.draw.describe().items() if k != "png_compression"},
        "input_size": list(loaded.input_size),
        "grads": [grads.grads, grads.target, grads.cam, grads.cam_classes]
        # Grad-CAM runs keep the settings they always had, so their --resume still matches.
        + ([grads.cam_method] if grads.cam_method != DEFAULT_CAM else []),
        **({"sae": str(opts.sae)} if opts.sae is not None else {}),
    }
    # What the family's own options change (a clip's length, a detector's threshold).
    settings.update(run_family(loaded.family).settings(loaded, opts))
    records = RunRecords(opts.out, settings)
    kept: list[Path] = []
    if opts.execution.resume:
        _reuse(records, results)
    elif opts.execution.overwrite:
        kept = records.reset([r.out_dir for r in results])
    return Plan(
        selector=selector,
        names=names,
        module=module,
        contexts=contexts,
        results=results,
        todo=[r for r in results if r.status != "reused"],
        sink=RunSink(
            opts.out,
            records,
            notify,
            stats=opts.stats,
            thresholds=_thresholds(opts, loaded, names),
            random=loaded.weights.random,
            resume=results if opts.execution.resume else None,
        ),
        kept=[p.relative_to(opts.out).as_posix() for p in kept],
    )


def _thresholds(opts: RunOptions, loaded: LoadedModel, names: list[str]) -> Thresholds:
    """The run's thresholds, with the selected modules whose outputs are scores (a
    detector's logits) as the family's row says."""

    thresholds = opts.thresholds or Thresholds()
    readouts = loaded.family.readouts_among(names)
    return dataclasses.replace(thresholds, readouts=readouts) if readouts else thresholds


def _check_overlay_channel(
    opts: RunOptions, loaded: LoadedModel, names: list[str], contexts: Any
) -> None:
    """Refuse an ``overlay_channel`` no selected layer has, before the first image: every
    overlay would be left out, and the run would succeed with none written. A leaf module's
    own channel count (``out_channels``, ``num_features``, ...) is known from its structure;
    a container's output may concatenate its branches, so its channels are read from one
    forward of a blank input, as ``list-layers`` traces the model; a layer still unknown
    (the trace failed) gets the benefit of the doubt."""
    channel = opts.draw.overlay_channel
    if channel is None or opts.capture != "output" or not names:
        return
    module = loaded.module
    counts: list[int | None] = [
        None
        if next(iter(module.get_submodule(name).children()), None) is not None
        else getattr(contexts.get(name), "channels_hint", None)
        for name in names
    ]
    if any(count is not None and count > channel for count in counts):
        return
    if any(count is None for count in counts):
        traced = _traced_channels(
            loaded, [n for n, c in zip(names, counts, strict=True) if c is None], contexts
        )
        counts = [traced.get(n) if c is None else c for n, c in zip(names, counts, strict=True)]
    if any(count is None or count > channel for count in counts):
        return
    most = max(c for c in counts if c is not None)
    raise UsageError(
        f"--overlay-channel {channel}: the selected layers have at most {most} channels "
        f"(0-{most - 1}); pick one below {most}"
    )


def _traced_channels(loaded: LoadedModel, names: list[str], contexts: Any) -> dict[str, int]:
    """Module -> the most channels its outputs are drawn with, from one forward of a blank
    input (fed as the model's family feeds it); empty when the model fails on it."""
    import torch

    shape = traced_input_shape(loaded.module, loaded.preprocess, loaded.input_size)
    recorder = ActivationRecorder(loaded.module, names, keep_tensors=False, per_image=True)
    try:
        with recorder, torch.inference_mode():
            loaded.family.call(loaded.module, torch.zeros(shape, device=loaded.device))
    except Exception:  # the model's own code: the run will say what it makes of real images
        return {}
    channels: dict[str, int] = {}
    for cap in recorder.captures:
        if cap.refused is not None or len(cap.shape) < 2:
            continue
        blank = np.zeros(cap.shape[1:], dtype=np.float32)
        drawable = to_drawable(blank, contexts.get(cap.module))
        if drawable.kind in ("maps", "clip") and drawable.array is not None:
            count = int(drawable.array.shape[0])
            channels[cap.module] = max(channels.get(cap.module, 0), count)
    return channels


def _reuse(records: RunRecords, results: list[ImageResult]) -> None:
    """Mark the images an earlier run completed (same settings, files still there) as
    reused; their records stay in the ledger, where the run reads them when it needs them."""
    done = records.completed()
    for result in results:
        offset = done.get((str(result.path), result.out_dir.as_posix()))
        if offset is not None:
            result.status, result.record = "reused", offset
