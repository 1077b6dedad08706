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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.command.forward import BatchForward, model_failure
from actviz.command.progress import Reporter
from actviz.errors import ActvizError
from actviz.gradients import backward, choose_cam_keys
from actviz.hooks import ActivationRecorder, eval_mode
from actviz.results import ImageResult, LayerResult
from actviz.run.draw import draw_image, summaries
from actviz.run.families import IMAGE_KINDS, Batch, Extras, Probe, run_family
from actviz.run.gradients import write_gradient_flow
from actviz.run.job import ImageJob, finite_scores, top_k_predictions
from actviz.run.pca import pca_warnings
from actviz.run.pca_pass import PcaPass
from actviz.run.scales import SharedScales, shared_ranges
from actviz.statistics import stats_callback

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import GradientOptions, RunOptions
    from actviz.run.pca_pass import PcaPass
    from actviz.run.plan import Plan

__all__ = ["capture_and_render"]


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

    ex = opts.execution
    forward = BatchForward(loaded, plan.module, ex)
    # Statistics are computed where the activation is: on an accelerator inside the hook,
    # before the copy; on the CPU in the render threads, where they run in parallel.
    on_cpu = loaded.device.type == "cpu"
    summarize = stats_callback(plan.contexts) if opts.stats and not on_cpu else None
    stream = _Stream(model, loaded, plan, opts, notify, warn or notify.warn, forward)
    stream.stats_fn = stats_callback(plan.contexts) if opts.stats and on_cpu else None
    if opts.draw.norm == "shared":
        stream.ranges = _shared_scales(forward, plan, opts)
    if opts.draw.pca:
        # The components are fitted over every image: the pass samples and keeps the images,
        # and their PCA pictures are drawn, and the images recorded, after it.

        stream.pca = PcaPass(plan, opts, ex.batch_size)
    with (
        ActivationRecorder(
            plan.module, plan.names, mode=opts.capture, summarize=summarize, per_image=True
        ) as recorder,
        eval_mode(plan.module),
        ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
        contextlib.ExitStack() as stack,
    ):
        return stream.run(recorder, pool, stack)


def _shared_scales(forward: BatchForward, plan: Plan, opts: RunOptions) -> SharedScales:
    """One scale per layer for the whole run, which needs every image's range before
    drawing: a pass of its own."""

    draw = opts.draw
    with (
        ActivationRecorder(plan.module, plan.names, mode=opts.capture, per_image=True) as recorder,
        eval_mode(plan.module),
    ):
        return shared_ranges(
            forward,
            [r.path for r in plan.results],
            recorder,
            draw.clip,
            order=draw.order,
            max_channels=draw.max_channels,
            contexts=plan.contexts,
            layout=draw.layout,
        )


_InFlight = tuple[list[ImageResult], list[Future[list[LayerResult]]]]


class _Stream:
    """One run's pass over its images on the local engine: each batch through the hooked
    model, its images' jobs drawn in the render threads while the next batch runs, each image
    recorded once drawn (after the PCA pass, with ``--view pca``)."""

    def __init__(
        self,
        model: str,
        loaded: LoadedModel,
        plan: Plan,
        opts: RunOptions,
        notify: Reporter,
        warn: Callable[[str], None],
        forward: BatchForward,
    ) -> None:
        self.model, self.loaded, self.plan, self.opts = model, loaded, plan, opts
        self.notify, self.warn, self.forward = notify, warn, forward
        self.stats_fn: Any = None
        """Each layer's statistics, computed in the render threads (on the CPU)."""
        self.ranges = SharedScales()
        self.pca: PcaPass | None = None
        self.never_ran: set[str] = set()
        self.cam_keys: frozenset[str] | None = None
        self.in_flight: deque[_InFlight] = deque()
        self.nonfinite: list[str] = []
        """The images whose class scores were not finite (their predictions left out)."""

    def run(self, recorder: Any, pool: ThreadPoolExecutor, stack: contextlib.ExitStack) -> set[str]:
        """Every image still to draw, batch by batch; the selected modules that never ran."""
        todo = self.plan.todo
        family = run_family(self.loaded.family)
        probe = family.probe(self.loaded, self.plan.module, self.opts, stack)
        try:
            for good, outputs, x in self.forward.batches(
                [r.path for r in todo], stack, self._failed
            ):
                self.never_ran.update(recorder.never_called())
                jobs = self._jobs(recorder, probe, good, outputs, x)
                if self.pca is not None:
                    # Sampled ahead of the batch's pictures: after the last batch, the fits
                    # wait for its sample, not for its pictures as well.
                    self.pca.add_batch(recorder.captures, jobs, pool)
                futures = [pool.submit(draw_image, job) for _, job in jobs]
                self.in_flight.append(([todo[index] for index, _, _ in good], futures))
                # One batch renders while the next one runs: no more is kept alive.
                while len(self.in_flight) > 1:
                    self._settle(*self.in_flight.popleft())
            while self.in_flight:
                self._settle(*self.in_flight.popleft())
            self._finish(probe, recorder, pool)
        except BaseException:
            for _, futures in self.in_flight:
                for future in futures:
                    future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        return self.never_ran

    def _jobs(
        self, recorder: Any, probe: Probe | None, good: list[Any], outputs: Any, x: Any
    ) -> list[tuple[int, ImageJob]]:
        """The jobs of one batch's images: the family's extras, the backward pass of a
        class, and what its images share."""
        grads, plan = self.opts.gradients, self.plan
        # A detector's maps come cropped to the image from the hooks (actviz.windows).
        captures = recorder.captures
        own_cam = probe is not None and probe.own_cam  # its maps are not of a class
        if grads.cam and self.cam_keys is None and not own_cam:
            explicit = self.opts.layers is not None
            self.cam_keys = choose_cam_keys(captures, plan.contexts, explicit=explicit)
        extras: Sequence[Extras] = [Extras()] * len(good)
        if probe is not None:
            extras = probe.batch(Batch(outputs, captures, x, len(good), recorder.paused))
        backward_pass = _Backward()
        if grads.backward and not own_cam:
            first = plan.todo[good[0][0]].path
            with recorder.paused():
                backward_pass = _backward(
                    self.model, self.loaded, plan, x, first, self.cam_keys, grads
                )
        if self.pca is not None:
            self.pca.check(captures)
        # With statistics on, each image's min, max and mean come from them.
        minmax = (
            []
            if self.opts.stats
            else [summaries(recorder[c.key] if c.tensor is None else c.tensor) for c in captures]
        )
        # A family's extras are drawn over what the model saw.
        shared = _BatchCaptures(captures, minmax, backward_pass, keep_input=probe is not None)
        return [
            (index, self._job(shared, i, index, size, x_cpu, outputs, extras[i]))
            for i, (index, size, x_cpu) in enumerate(good)
        ]

    def _job(
        self,
        shared: _BatchCaptures,
        i: int,
        index: int,
        size: tuple[int, int] | None,
        x_cpu: Any,
        outputs: Any,
        extras: Extras,
    ) -> ImageJob:
        """Image ``i`` of the batch: its size, note and predictions in its record, and its
        job, whose per-image pictures its record names."""
        loaded, result = self.loaded, self.plan.todo[index]
        result.size = size
        notes = [
            loaded.family.inputs.note(result.path),
            loaded.preprocess.fit_note(size, result.path) if size else None,
        ]
        result.note = "; ".join(note for note in notes if note) or None
        for note in notes:
            if note is not None:
                self.notify.warn(note)
        result.predictions = []
        if loaded.classifier and finite_scores(outputs, i):
            result.predictions = top_k_predictions(outputs, i, loaded.categories, self.opts.top_k)
        elif loaded.classifier:
            self._nonfinite(result)
        job = _image_job(
            shared, i, result, x_cpu, loaded, self.plan, self.opts, self.ranges, self.stats_fn
        )
        job = dataclasses.replace(job, extras=extras.job)
        result.extras.update(extras.record)
        for kind in IMAGE_KINDS:
            if kind.record is not None and kind.wanted(job):
                kind.keep(result, (job.folder / f"{kind.name}.png").as_posix())
        return job

    def _nonfinite(self, result: ImageResult) -> None:
        """An image whose class scores hold NaN or inf: said at the first (softmax would rank
        NaN "probabilities"), and flagged in its record."""
        result.extras["nonfinite_output"] = True
        self.nonfinite.append(str(result.path))
        if len(self.nonfinite) == 1:
            self.warn(
                f"{self.model}'s output for {result.path.name} holds NaN or inf, so its "
                f"top-{self.opts.top_k} predictions are left out (and those of any other such "
                "image); run -l all to find the first layer that gives them"
            )

    def _record(self, result: ImageResult) -> None:
        """An image done: recorded now, or once its PCA pictures are drawn."""
        if self.pca is None:
            self.plan.sink.add(result)
        else:
            self.pca.hold(result)

    def _settle(self, batch: list[ImageResult], futures: list[Future[list[LayerResult]]]) -> None:
        """A drawn batch: each image's layers (and gradient-flow chart), recorded."""
        for result, future in zip(batch, futures, strict=True):
            result.layers = future.result()
            if self.opts.gradients.grads:
                result.gradient_flow = write_gradient_flow(
                    self.opts.out, result, random=self.loaded.weights.random
                )
            self._record(result)

    def _failed(self, index: int, error: str | None) -> None:
        """An image that could not be read: recorded as failed."""
        result = self.plan.todo[index]
        result.status, result.error = "failed", error
        self._record(result)

    def _finish(self, probe: Probe | None, recorder: Any, pool: ThreadPoolExecutor) -> None:
        """What the family's probe has to say; with ``--view pca``, the fits, then the PCA
        pictures of every image, each image recorded once they are drawn."""
        for message in probe.warnings() if probe is not None else ():
            self.warn(message)
        pca = self.pca
        if pca is not None:
            if note := pca.note():
                self.warn(note)
            pca.finish(self.forward, recorder, pool, self.plan.sink.add)
            for message in pca_warnings(self.plan.pca_notes):
                self.warn(message)


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
    keep_input: bool = False
    """The family's extras are drawn over what the model saw."""


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
            or batch.keep_input
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
        features=plan.features,
        pca=plan.pca,
    )


def _render_threads() -> int:
    # Rendering is numpy and zlib, which release the GIL: one thread per core pays off.
    return max(2, min(8, os.cpu_count() or 2))
