"""A run's loop on the local engine: the images streamed through the hooked model in this
process, each batch drawn in a thread pool while the next one runs through the model.

Decoding runs ahead (a thread or DataLoader workers), at most one batch renders while the next
one is in the model, and no more is kept alive, so memory stays flat over any folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.command.forward import BatchForward, model_failure
from actviz.command.progress import Reporter
from actviz.errors import ActvizError
from actviz.gradients import backward, choose_cam_keys
from actviz.results import ImageResult, LayerResult
from actviz.run.detection import DetectionProbe, Found
from actviz.run.detection_cam import batch_detections
from actviz.run.draw import draw_image, summaries
from actviz.run.gradients import write_gradient_flow
from actviz.run.job import ImageJob, thumbnail_path, top_k_predictions
from actviz.run.optical_flow import optical_flow_iterations
from actviz.run.scales import SharedScales, shared_ranges
from actviz.stats import stats_callback

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import GradientOptions, RunOptions
    from actviz.run.sink import RunSink

__all__ = ["Plan", "capture_and_render"]


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


def capture_and_render(
    model: str,
    loaded: LoadedModel,
    plan: Plan,
    opts: RunOptions,
    notify: Reporter,
    warn: Callable[[str], None] | None = None,
) -> set[str]:
    """Stream the images through the hooked model; draw each batch while the next one runs.
    ``warn`` gives the run's warnings, so they are listed in the manifest too (default: only
    said through ``notify``).

    Returns the selected modules that never ran.
    """
    warn = warn or notify.warn
    from actviz.hooks import ActivationRecorder, eval_mode

    ex = opts.execution
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

    pca = None
    if opts.draw.pca:
        # The components are fitted over every image: the pass samples and keeps the images,
        # and their PCA pictures are drawn, and the images recorded, after it.
        from actviz.run.pca_pass import PcaPass

        pca = PcaPass(plan, opts, ex.batch_size)

    todo, sink, grads = plan.todo, plan.sink, opts.gradients
    never_ran: set[str] = set()
    cam_keys: frozenset[str] | None = None
    in_flight: deque[tuple[list[ImageResult], list[Future[list[LayerResult]]]]] = deque()

    def settle(batch: list[ImageResult], futures: list[Future[list[LayerResult]]]) -> None:
        for result, future in zip(batch, futures, strict=True):
            result.layers = future.result()
            if grads.grads:
                result.gradient_flow = write_gradient_flow(
                    opts.out, result, random=loaded.weights.random
                )
            record(result)

    def failed(index: int, error: str | None) -> None:
        result = todo[index]
        result.status, result.error = "failed", error
        record(result)

    record = sink.add if pca is None else pca.hold

    with (
        ActivationRecorder(
            plan.module, plan.names, mode=opts.capture, summarize=summarize
        ) as recorder,
        eval_mode(plan.module),
        ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
        contextlib.ExitStack() as stack,
    ):
        probe = _probe(loaded, plan, stack)
        empty = 0  # images of a detector with no detection above the threshold
        try:
            for good, logits, x in forward.batches([r.path for r in todo], stack, failed):
                never_ran.update(recorder.never_called())
                # A detector's maps come cropped to the image from the hooks (actviz.windows).
                captures = recorder.captures
                if grads.cam and cam_keys is None and probe is None:
                    explicit = opts.layers is not None
                    cam_keys = choose_cam_keys(captures, plan.contexts, explicit=explicit)
                backward_pass = _Backward()
                detected = None
                if probe is not None:  # a detector: its maps are of one detection, not a class
                    detected = batch_detections(
                        logits,
                        captures,
                        x,
                        module=plan.module,
                        family_call=loaded.family.call,
                        probe=probe,
                        threshold=opts.score_threshold,
                        categories=loaded.categories,
                        cam=grads.cam,
                        rank=opts.detection - 1,
                        paused=recorder.paused,
                    )
                elif grads.backward:
                    with recorder.paused():
                        backward_pass = _backward(
                            model, loaded, plan, x, todo[good[0][0]].path, cam_keys, grads
                        )
                if pca is not None:
                    pca.check(captures)
                # With statistics on, each image's min, max and mean come from them.
                minmax = (
                    []
                    if opts.stats
                    else [
                        summaries(recorder[c.key] if c.tensor is None else c.tensor)
                        for c in captures
                    ]
                )
                shared = _BatchCaptures(captures, minmax, backward_pass)
                jobs = []
                for i, (index, size, x_cpu) in enumerate(good):
                    result = todo[index]
                    result.size = size
                    result.note = loaded.preprocess.fit_note(size, result.path) if size else None
                    if result.note is not None:
                        notify.warn(result.note)
                    result.predictions = (
                        top_k_predictions(logits, i, loaded.categories, opts.top_k)
                        if loaded.classifier
                        else []
                    )
                    job = _image_job(
                        shared, i, result, x_cpu, loaded, plan, opts, ranges, stats_in_threads
                    )
                    if loaded.family.key == "optical_flow":
                        job = dataclasses.replace(
                            job, optical_flow=optical_flow_iterations(logits, i)
                        )
                        if opts.draw.grids and job.optical_flow is not None:
                            result.pictures["optical_flow"] = (
                                result.out_dir / "optical_flow.png"
                            ).as_posix()
                    if detected is not None:
                        found, cams = detected[i]
                        _record_detections(result, found, opts)
                        empty += not found.scores
                        job = dataclasses.replace(job, detections=found, detection_cams=cams)
                    jobs.append((index, job))
                if pca is not None:
                    # Sampled ahead of the batch's pictures: after the last batch, the fits
                    # wait for its sample, not for its pictures as well.
                    pca.add_batch(captures, jobs, pool)
                futures = [pool.submit(draw_image, job) for _, job in jobs]
                in_flight.append(([todo[index] for index, _, _ in good], futures))
                # One batch renders while the next one runs: no more is kept alive.
                while len(in_flight) > 1:
                    settle(*in_flight.popleft())
            while in_flight:
                settle(*in_flight.popleft())
            if empty:
                random = " (random weights: an untrained detector finds nothing)"
                warn(
                    f"no detection scored {opts.score_threshold:g} or more in {empty} "
                    f"image(s){random if loaded.weights.random else ''}; the layers are "
                    "recorded anyway, and --score-threshold lowers the cut"
                )
            if pca is not None:
                if note := pca.note():
                    warn(note)
                pca.finish(forward, recorder, pool, sink.add)
                for key, note in plan.pca_notes.items():
                    warn(f"--view pca: no PCA picture of {key}: {note}")
        except BaseException:
            for _, futures in in_flight:
                for future in futures:
                    future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return never_ran


def _probe(loaded: LoadedModel, plan: Plan, stack: contextlib.ExitStack) -> DetectionProbe | None:
    """For a detector, the watch on its own transform (padding to crop, sizes), open for the
    run; None for other models."""
    from actviz.models.families import detection_transform, is_detector

    if not is_detector(plan.module) or detection_transform(plan.module) is None:
        return None
    return stack.enter_context(DetectionProbe(plan.module))


def _record_detections(result: ImageResult, found: Found, opts: RunOptions) -> None:
    """One image's detections above the threshold, in its record."""
    result.detections = found.records()
    result.detection_heads = dict(found.head_shapes) or None
    if opts.draw.grids:
        result.detections_file = (result.out_dir / "detections.png").as_posix()
    if any(found.heads) and opts.draw.grids:
        result.detection_heads_file = (result.out_dir / "detection_heads.png").as_posix()
    if opts.gradients.cam and opts.draw.grids:
        result.detection_cam_file = (result.out_dir / "detection_cam.png").as_posix()


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
    plan: Plan,
    x: Any,
    first: Path,
    cam_keys: frozenset[str] | None,
    grads: GradientOptions,
) -> _Backward:
    """Gradients of the target class for the selected layers (or only the CAM layers)."""
    keys = cam_keys or frozenset()
    layers = plan.names if grads.grads else sorted({k.split(":")[0].split("[")[0] for k in keys})
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
            cam_method=grads.cam_method,
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
    plan: Plan,
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
            if opts.draw.overlay
            or opts.draw.pca
            or opts.report
            or opts.gradients.cam
            or loaded.segmentation
            or loaded.family.key == "optical_flow"
            or loaded.family.key == "detection"  # detections.png
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
        features=plan.features,
        pca=plan.pca,
    )


def _render_threads() -> int:
    # Rendering is numpy and zlib, which release the GIL: one thread per core pays off.
    return max(2, min(8, os.cpu_count() or 2))
