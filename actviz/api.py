"""The pipeline in one readable place: load -> select -> capture -> render -> write.

The CLI is a thin layer over these functions; they return small dataclasses, report progress
through an optional :class:`Reporter`, and raise :class:`~actviz.errors.ActvizError` subclasses.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ActvizError
from actviz.forward import (
    BatchForward,
    SharedScales,
    model_failure,
    shared_ranges,
    top_k_predictions,
)
from actviz.gradients import backward, choose_cam_keys, write_flow_chart, write_run_flow_chart
from actviz.models import LayerInfo, LayerListing, list_layers
from actviz.options import GradientOptions, RunOptions
from actviz.render import ImageJob, draw_image, render_activation, summaries, thumbnail_path
from actviz.results import (
    ImageResult,
    LayerResult,
    Prediction,
    Reporter,
    RunResult,
    SilentReporter,
    image_record,
    manifest,
    reuse_earlier,
)
from actviz.stats import stats_callback, write_stats

if TYPE_CHECKING:
    from actviz.models import LoadedModel

__all__ = [
    "ImageResult",
    "LayerInfo",
    "LayerListing",
    "LayerResult",
    "Prediction",
    "Reporter",
    "RunOptions",
    "RunResult",
    "list_layers",
    "render_activation",
    "run",
]


def run(
    model: str,
    inputs: Sequence[Path | str],
    options: RunOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> RunResult:
    """Run images through a model and write one feature-map grid PNG per selected layer.

    Args:
        model: A torchvision model name, or ``package.module:factory`` /
            ``path/to/file.py:factory`` for the user's own model (runs that code).
        inputs: Image files and/or folders (walked recursively).
        options: The run's options (:class:`~actviz.options.RunOptions`).
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, any option by its flat name (``layers``, ``out``,
            ``weights``, ``norm``, ``batch_size``, ``cam``, ...): every field of
            :class:`~actviz.options.RunOptions` and of its groups.

    Returns:
        What was written, per image and layer.

    Raises:
        ActvizError: For every expected failure (unknown model, empty selection, ...).
        TypeError: For an unknown keyword, or keywords given together with ``options``.
    """
    from actviz import images as image_io
    from actviz import output

    if options is not None and keywords:
        raise TypeError("pass either options or keywords, not both")
    opts = options or RunOptions.from_keywords(**keywords)
    started = time.perf_counter()
    notify = reporter or SilentReporter()
    found = image_io.discover([Path(p) for p in inputs])
    created = not opts.out.exists()
    output.prepare_out_dir(
        opts.out, resume=opts.execution.resume, overwrite=opts.execution.overwrite
    )
    # A run that fails before writing anything leaves no empty folder behind.
    with output.removed_if_empty(opts.out, created):
        loaded, warnings = _load(model, opts, notify)
        selector, names = _select(model, loaded, opts, warnings, notify)
        state = _plan(model, loaded, selector, names, found, opts)
        if state.kept:
            shown = ", ".join(state.kept[:5]) + (", ..." if len(state.kept) > 5 else "")
            warnings.append(f"--overwrite kept {len(state.kept)} file(s) no run wrote: {shown}")
            notify.warn(warnings[-1])
        never_ran = _capture_and_render(model, loaded, state, opts, notify)
        for name in sorted(never_ran):
            warnings.append(f"layer {name} was selected but never ran in the forward pass")
            notify.warn(warnings[-1])
        return _write(model, loaded, state, found.skipped, warnings, opts, started)


@dataclass
class _Plan:
    """What a run is about to do: its layers, their contexts, and the images still to draw."""

    selector: str
    names: list[str]
    module: Any
    contexts: Mapping[str, Any]
    results: list[ImageResult]
    todo: list[ImageResult]
    records: Any
    kept: list[str]


def _load(model: str, opts: RunOptions, notify: Reporter) -> tuple[LoadedModel, list[str]]:
    """Build the model on its device; warn loudly when its weights are random."""
    from actviz.models import load_model

    load = opts.load
    loaded = load_model(
        model,
        weights=load.weights,
        device=load.device,
        trust_checkpoint=load.trust_checkpoint,
        input_size=load.input_size,
        in_chans=load.in_chans,
    )
    warnings: list[str] = []
    if loaded.weights.random and loaded.weights.spec != "none":
        warnings.append(_random_weights_warning(loaded))
        notify.warn(warnings[-1])
    return loaded, warnings


def _select(
    model: str, loaded: LoadedModel, opts: RunOptions, warnings: list[str], notify: Reporter
) -> tuple[str, list[str]]:
    """The selector (the architecture's default when none was given) and the modules it names,
    less those it swept in that never run (one warning names them)."""
    from actviz.hooks import layer_refs
    from actviz.layouts import default_selector
    from actviz.models.listing import skip_modules_that_never_run
    from actviz.selectors import select_layers

    if opts.layers is not None:
        selector = opts.layers
    elif opts.capture == "attn":  # attention maps come from the attention modules
        selector = "MultiheadAttention"
    else:
        selector = default_selector(loaded.module)
    names = select_layers(layer_refs(loaded.module), selector, model=model)
    # What the selector swept in but the forward never calls would only draw nothing.
    shape = (1, loaded.preprocess.channels, *loaded.input_size)
    names, skipped = skip_modules_that_never_run(loaded.module, shape, selector, names)
    if skipped is not None:
        warnings.append(skipped)
        notify.warn(skipped)
    return selector, names


def _plan(
    model: str,
    loaded: LoadedModel,
    selector: str,
    names: list[str],
    found: Any,
    opts: RunOptions,
) -> _Plan:
    """Output folders per image, the resume records, and which images are still to draw."""
    import torch

    from actviz import output
    from actviz.layouts import layer_contexts

    dirs = output.image_dirs([item.rel for item in found.images])
    results = [
        ImageResult(path=item.path, out_dir=folder)
        for item, folder in zip(found.images, dirs, strict=True)
    ]
    grads = opts.gradients
    settings = {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "selector": selector,
        "capture": opts.capture,
        "draw": {k: v for k, v in opts.draw.describe().items() if k != "png_compression"},
        "input_size": list(loaded.input_size),
        "grads": [grads.grads, grads.target, grads.cam, grads.cam_classes],
    }
    records = output.RunRecords(opts.out, settings)
    kept: list[Path] = []
    if opts.execution.resume:
        reuse_earlier(records.completed(), results)
    elif opts.execution.overwrite:
        kept = records.reset([r.out_dir for r in results])
    module = loaded.module
    if opts.execution.channels_last:
        module = module.to(memory_format=torch.channels_last)
    return _Plan(
        selector=selector,
        names=names,
        module=module,
        contexts=layer_contexts(module, loaded.input_size),
        results=results,
        todo=[r for r in results if r.status != "reused"],
        records=records,
        kept=[p.relative_to(opts.out).as_posix() for p in kept],
    )


def _capture_and_render(
    model: str, loaded: LoadedModel, plan: _Plan, opts: RunOptions, notify: Reporter
) -> set[str]:
    """Stream the images through the hooked model; draw each batch while the next one runs.

    Returns the selected modules that never ran.
    """
    from actviz.hooks import ActivationRecorder, eval_mode

    ex = opts.execution
    if ex.engine == "ray":
        from actviz.engines import stats_on_ray

        notify.start(len(plan.results))
        for result in plan.results:
            if result.status == "reused":
                notify.advance(result)
        return stats_on_ray(model, plan.names, plan.todo, plan.records, opts, notify)
    forward = BatchForward(loaded, plan.module, ex.batch_size, ex.workers, ex.amp, ex.channels_last)
    # Statistics are computed where the activation is: on an accelerator inside the hook,
    # before the copy; on the CPU in the render threads, where they run in parallel.
    on_cpu = loaded.device.type == "cpu"
    summarize = stats_callback(plan.contexts) if opts.stats and not on_cpu else None
    stats_in_threads = stats_callback(plan.contexts) if opts.stats and on_cpu else None
    ranges = SharedScales()
    if opts.draw.norm == "shared":
        # One scale per layer for the whole run needs every image's range before drawing.
        with (
            ActivationRecorder(plan.module, plan.names, mode=opts.capture) as recorder,
            eval_mode(plan.module),
        ):
            paths = [r.path for r in plan.results]
            draw = opts.draw
            ranges = shared_ranges(
                forward,
                paths,
                recorder,
                draw.clip,
                order=draw.order,
                max_channels=draw.max_channels,
                contexts=plan.contexts,
                layout=draw.layout,
            )

    notify.start(len(plan.results))
    for result in plan.results:
        if result.status == "reused":
            notify.advance(result)
    todo, records, grads = plan.todo, plan.records, opts.gradients
    never_ran: set[str] = set()
    cam_keys: frozenset[str] | None = None
    in_flight: deque[tuple[list[ImageResult], list[Future[list[LayerResult]]]]] = deque()

    def settle(batch: list[ImageResult], futures: list[Future[list[LayerResult]]]) -> None:
        for result, future in zip(batch, futures, strict=True):
            result.layers = future.result()
            if grads.grads:
                result.gradient_flow = write_flow_chart(opts.out, result)
            records.add(image_record(result))
            notify.advance(result)

    def failed(index: int, error: str | None) -> None:
        result = todo[index]
        result.status, result.error = "failed", error
        records.add(image_record(result))
        notify.advance(result)

    with (
        ActivationRecorder(
            plan.module, plan.names, mode=opts.capture, summarize=summarize
        ) as recorder,
        eval_mode(plan.module),
        ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
        contextlib.ExitStack() as stack,
    ):
        try:
            for good, logits, x in forward.batches([r.path for r in todo], stack, failed):
                never_ran.update(recorder.never_called())
                captures = recorder.captures
                if grads.cam and cam_keys is None:
                    explicit = opts.layers is not None
                    cam_keys = choose_cam_keys(captures, plan.contexts, explicit=explicit)
                backward_pass = _Backward()
                if grads.backward:
                    with recorder.paused():
                        backward_pass = _backward(
                            model, loaded, plan, x, todo[good[0][0]].path, cam_keys, grads
                        )
                # With statistics on, each image's min, max and mean come from them.
                minmax = [] if opts.stats else [summaries(recorder[c.key]) for c in captures]
                shared = _BatchCaptures(captures, minmax, backward_pass)
                futures = []
                for i, (index, size, x_cpu) in enumerate(good):
                    result = todo[index]
                    result.size = size
                    result.note = loaded.preprocess.fit_note(size, result.path) if size else None
                    if result.note is not None:
                        notify.warn(result.note)
                    result.predictions = top_k_predictions(logits, i, loaded.categories, opts.top_k)
                    job = _image_job(
                        shared, i, result, x_cpu, loaded, plan, opts, ranges, stats_in_threads
                    )
                    futures.append(pool.submit(draw_image, job))
                in_flight.append(([todo[index] for index, _, _ in good], futures))
                # One batch renders while the next one runs: no more is kept alive.
                while len(in_flight) > 1:
                    settle(*in_flight.popleft())
            while in_flight:
                settle(*in_flight.popleft())
        except BaseException:
            for _, futures in in_flight:
                for future in futures:
                    future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return never_ran


@dataclass
class _Backward:
    """One batch's backward pass: gradients per capture key, targets, per-class CAM maps."""

    gradients: Mapping[str, Any] = field(default_factory=dict)
    targets: list[int] = field(default_factory=list)
    class_maps: dict[str, list[list[Any]]] = field(default_factory=dict)
    cam_keys: frozenset[str] = frozenset()


@dataclass
class _BatchCaptures:
    """What every image job of one batch shares."""

    captures: list[Any]
    summaries: list[Any]
    backward: _Backward


def _backward(
    model: str,
    loaded: LoadedModel,
    plan: _Plan,
    x: Any,
    first: Path,
    cam_keys: frozenset[str] | None,
    grads: GradientOptions,
) -> _Backward:
    """Gradients of the target class for the selected layers (or only the CAM layers)."""
    keys = cam_keys or frozenset()
    layers = plan.names if grads.grads else sorted({k.split(":")[0] for k in keys})
    try:
        gradients, targets, class_maps = backward(
            plan.module,
            x,
            layers,
            target=grads.target,
            categories=loaded.categories,
            cam_keys=keys,
            cam_classes=grads.cam_classes,
            contexts=plan.contexts,
        )
    except ActvizError:
        raise
    except Exception as exc:  # the model's own code in the backward pass
        raise model_failure(model, first, exc, x) from exc
    if not grads.grads:
        gradients = {k: v for k, v in gradients.items() if k in keys}
    return _Backward(gradients, targets, class_maps, keys)


def _image_job(
    batch: _BatchCaptures,
    i: int,
    result: ImageResult,
    x_cpu: Any,
    loaded: LoadedModel,
    plan: _Plan,
    opts: RunOptions,
    ranges: SharedScales,
    stats_fn: Any,
) -> ImageJob:
    """The drawing of image ``i`` of a batch, for a render thread."""
    back = batch.backward
    if opts.report:
        result.thumbnail = thumbnail_path(result.out_dir).as_posix()
    target = back.targets[i] if back.targets else None
    names = loaded.categories or []
    label = names[target] if target is not None and target < len(names) else None
    return ImageJob(
        captures=batch.captures,
        summaries=batch.summaries,
        index=i,
        folder=result.out_dir,
        out_dir=opts.out,
        options=opts.draw,
        contexts=plan.contexts,
        ranges=ranges.ranges,
        shared_channels=ranges.channels,
        shared_images=ranges.images,
        model_input=(
            x_cpu
            if opts.draw.overlay or opts.report or opts.gradients.cam or loaded.segmentation
            else None
        ),
        mean=loaded.preprocess.mean,
        std=loaded.preprocess.std,
        thumbnail=opts.report,
        gradients=back.gradients,
        gradient_grids=opts.gradients.grads,
        stats_fn=stats_fn,
        target=target,
        target_label=label,
        cam_keys=back.cam_keys,
        class_cams={key: maps[i] for key, maps in back.class_maps.items()},
        random_weights=loaded.weights.random,
        channel_names=loaded.channel_names,
        segmentation=loaded.segmentation,
    )


def _write(
    model: str,
    loaded: LoadedModel,
    plan: _Plan,
    skipped: list[tuple[Path, str]],
    warnings: list[str],
    opts: RunOptions,
    started: float,
) -> RunResult:
    """Statistics, flow chart, manifest and report: the files about the whole run."""
    from actviz import output

    out_dir, ex, results = opts.out, opts.execution, plan.results
    stats_doc = write_stats(out_dir, results, opts.thresholds) if opts.stats else None
    flow = write_run_flow_chart(out_dir, results) if opts.gradients.grads else None
    manifest_path = out_dir / "manifest.json"
    result = RunResult(
        model=model,
        weights=loaded.weights,
        device=str(loaded.device),
        selector=plan.selector,
        layers=plan.names,
        out=out_dir,
        images=results,
        skipped=skipped,
        seconds=time.perf_counter() - started,
        manifest=manifest_path,
        warnings=warnings,
        options={
            "capture": opts.capture,
            "input_size": list(loaded.input_size),
            "in_chans": opts.load.in_chans,
            "batch_size": ex.batch_size,
            "workers": ex.workers,
            "amp": ex.amp,
            "channels_last": ex.channels_last,
            "png_compression": opts.draw.png_compression,
            "resume": ex.resume,
            "overwrite": ex.overwrite,
            "engine": ex.engine,
        },
        render=opts.draw.describe(),
        stats=stats_doc,
        report=out_dir / "index.html" if opts.report else None,
        gradient_flow=flow,
    )
    record = manifest(result)
    output.write_json(manifest_path, record)
    if opts.report:
        from actviz.report import build_report

        for rel, data in build_report(record, stats_doc, out_dir_name=out_dir.name).items():
            output.write_bytes(out_dir / rel, data)
    return result


def _render_threads() -> int:
    # Rendering is numpy and zlib, which release the GIL: one thread per core pays off.
    return max(2, min(8, os.cpu_count() or 2))


def _random_weights_warning(loaded: LoadedModel) -> str:
    why = loaded.weights.reason or "no pretrained weights"
    return (
        f"RANDOM WEIGHTS: {why}. The grids show an untrained {loaded.name}; "
        "pass --weights none to say that is what you want."
    )
