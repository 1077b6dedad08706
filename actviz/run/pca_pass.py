"""``--view pca`` in the run's one pass over the images.

The components are fitted once over every image, so a layer's PCA pictures can only be drawn
once the last image has run through the model. The run's pass does everything else as without
the view (grids, overlays, statistics, drawn while the next batch runs), samples each image's
positions for the fit, and keeps each batch's captures: after the fits, every kept image's PCA
pictures are drawn from them, and the images are recorded in their order, each once its
pictures are drawn (while later images are drawn).

Kept captures are bounded by :data:`KEEP_BYTES`. Past it, the images that did not fit are
drawn without being kept, and after the fit they run through the model a second time for
their PCA pictures alone (cut where the decoder's batch starts, so that each is batched, and
computed, exactly as in the first pass). Images an earlier run drew (``--resume``) are only
sampled, in a pass of their own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, Protocol

from actviz import output
from actviz.errors import UsageError
from actviz.render.pca import pca_width
from actviz.render.png import Bands
from actviz.run.pca import CLIP_NOTE, PcaSampler, spatial_maps
from actviz.run.pictures import PICTURE_KINDS, pca_input, pca_pictures
from actviz.run.record import layer_view

if TYPE_CHECKING:
    from actviz.command.forward import BatchForward
    from actviz.render.png import Bands
    from actviz.results import ImageResult
    from actviz.run.job import ImageJob
    from actviz.run.options import RunOptions

__all__ = ["KEEP_BYTES", "PcaPass"]

#: The captures (and inputs) the run's pass keeps for the PCA pictures, in bytes at most;
#: past it, the other images run through the model a second time after the fit.
KEEP_BYTES = 1 << 30


class Plan(Protocol):
    """What the pass needs of the run's plan (:class:`actviz.run.plan.Plan`)."""

    results: list[ImageResult]
    todo: list[ImageResult]
    contexts: Mapping[str, Any]
    pca: dict[str, Any]
    pca_notes: dict[str, str]


_PCA = next(kind for kind in PICTURE_KINDS if kind.name == "pca")


class PcaPass:
    """The PCA side of a run's pass: samples, kept images, and the records held till the
    pictures are drawn.

    Args:
        plan: The run's plan (its images, the images to draw, their layers' contexts).
        opts: The run's options.
        batch_size: The decoder's batch size (where a cut may fall).
        keep_bytes: What may be kept (:data:`KEEP_BYTES` when None).
    """

    def __init__(
        self, plan: Plan, opts: RunOptions, batch_size: int, keep_bytes: int | None = None
    ) -> None:
        self.plan = plan
        self.layout = opts.draw.layout
        self.png_level = opts.draw.png_compression
        self.sampler = PcaSampler(len(plan.results))
        position = {id(r): i for i, r in enumerate(plan.results)}
        self.run_index = [position[id(r)] for r in plan.todo]
        self.batch_size = max(batch_size, 1)
        self.budget = KEEP_BYTES if keep_bytes is None else keep_bytes
        self.held = 0
        self.kept: list[tuple[int, ImageJob]] = []
        """``(index in todo, job)`` of the images drawn from kept captures."""
        self.later: list[tuple[int, ImageJob]] = []
        """The images past the budget, their jobs without captures."""
        self.rest: int | None = None
        """The index in todo of the first image not kept, once the budget is spent."""
        self.pending: list[ImageResult] = []
        self.checked = False
        self.sampling: list[Future[None]] = []
        """The batches being sampled in the render threads."""
        self.bands = self._bands()
        """The bands the kept images' PCA pictures share: their inputs, deflated while the
        next batch runs, and each layer's header."""

    def add_batch(
        self, captures: list[Any], jobs: list[tuple[int, ImageJob]], pool: Executor | None = None
    ) -> None:
        """Sample one batch of the run's pass (``(index in todo, job)`` per image), in
        ``pool`` when given (while the next batch runs), and keep it while the budget allows."""
        rows = [(self.run_index[i], job.index) for i, job in jobs]
        if pool is None:
            self._sample(captures, rows)
        else:
            self.sampling.append(pool.submit(self._sample, captures, rows))
        if self.rest is None:
            self.held += sum(c.tensor.nbytes for c in captures if c.tensor is not None)
            self.held += sum(_nbytes(job.model_input) for _, job in jobs)
            if self.held <= self.budget:
                # Gradients and CAM maps are drawn already: the PCA pictures need neither.
                kept = [(i, _drawn(j)) for i, j in jobs]
                self.kept += kept
                if pool is None:
                    self._inputs(kept)
                else:
                    self.sampling.append(pool.submit(self._inputs, kept))
                return
            # The cut falls where the decoder's batch of this one starts: every image after
            # it is batched again as in this pass.
            self.rest = (jobs[0][0] // self.batch_size) * self.batch_size
            moved = [(i, j) for i, j in self.kept if i >= self.rest]
            self.kept = [(i, j) for i, j in self.kept if i < self.rest]
            self.later += [(i, _light(j)) for i, j in moved]
        self.later += [(i, _light(j)) for i, j in jobs]

    def hold(self, result: ImageResult) -> None:
        """An image finished by the pass (drawn or failed): recorded once its PCA pictures
        are drawn, in this order."""
        self.pending.append(result)

    def note(self) -> str | None:
        """What the budget made the run do, if anything: for the run's stderr."""
        if self.rest is None:
            return None
        return (
            f"--view pca: the activations of {self.rest} of {len(self.plan.todo)} images fitted "
            f"in the {self.budget / (1 << 20):.4g} MiB kept for the PCA pictures; the other images "
            "run through the model a second time after the fit"
        )

    def finish(
        self,
        forward: BatchForward,
        recorder: Any,
        pool: Executor,
        record: Callable[[ImageResult], None],
    ) -> None:
        """Sample the reused images, fit, draw every image's PCA pictures (the images past
        the budget through the model again), and record every image in order, each as
        soon as its pictures are drawn."""
        plan = self.plan
        sampling, self.sampling = self.sampling, []
        for future in sampling:
            future.result()
        reused = [(i, r.path) for i, r in enumerate(plan.results) if r.status == "reused"]
        pending, self.pending = self.pending, []
        with contextlib.ExitStack() as stack:
            if reused:
                paths = [p for _, p in reused]
                for good, _logits, _x in forward.batches(paths, stack):
                    rows = [(reused[i][0], row) for row, (i, _, _) in enumerate(good)]
                    self._sample(recorder.captures, rows)
            kept, self.kept = self.kept, []
            with _blas().limit(limits=1, user_api="blas"):  # see _one_torch_thread
                plan.pca = self._fit(pool)
                pending = self._draw_kept(pool, kept, pending, record)
            # The kept captures and inputs are drawn: let them go before any second pass.
            del kept
            self.bands = self._bands()
            plan.pca_notes = dict(self.sampler.notes)
            if self.rest is not None:
                self._second_pass(forward, recorder, stack, pool)
        for result in pending:
            record(result)

    def check(self, captures: list[Any]) -> None:
        """Refuse the run at its first batch, before anything is drawn, when no selected
        output has positions to colour (``--view pca -l fc``): it would draw nothing.

        Raises:
            UsageError: Naming the layers and why each has no positions.
        """

        if self.checked:
            return
        self.checked = True
        notes = {}
        for cap in captures:
            if cap.kind == "attention" or cap.tensor is None or len(cap.tensor) == 0:
                continue
            ctx = self.plan.contexts.get(cap.module)
            maps, note = spatial_maps(cap.tensor[0], ctx, self.layout)
            if maps is not None:
                return
            notes[cap.key] = note or "no spatial positions"
        said = "; ".join(f"{key}: {note}" for key, note in list(notes.items())[:3])
        clips = [key for key, note in notes.items() if note == CLIP_NOTE]
        if clips:  # a video model: each of its maps is drawn as time strips
            raise UsageError(
                f"--view pca does not colour video layers yet ({', '.join(clips[:3])}); drop "
                "--view pca to draw them as time strips"
            )
        raise UsageError(
            f"--view pca colours positions, and no selected layer has any ({said}); select "
            "conv or token layers (e.g. -l layer4), or drop --view pca"
        )

    def _sample(self, captures: list[Any], rows: list[tuple[int, int]]) -> None:
        """Sample ``(index in the run, row of the batch)`` of each image of a batch."""
        for cap in captures:
            if cap.kind == "attention" or cap.tensor is None:
                continue
            if cap.refused is not None:  # its rows are not the images
                self.sampler.notes.setdefault(cap.key, cap.refused)
                continue
            ctx = self.plan.contexts.get(cap.module)
            for index, row in rows:
                self.sampler.add_sample(cap.key, index, cap.tensor[row], ctx, self.layout)

    def _inputs(self, jobs: list[tuple[int, ImageJob]]) -> None:
        """Deflate what the model saw of kept images (the band their PCA pictures share)."""

        for i, job in jobs:
            if job.model_input is not None:
                pca_input(job, self.bands, i, pca_width(tuple(job.model_input.shape[-2:])))

    def _fit(self, pool: Executor) -> dict[str, Any]:
        """Every layer's fit, one task each in the render threads, the costliest first;
        in the order the layers were sampled."""
        keys = self.sampler.keys()
        tasks = {
            key: pool.submit(self._fit_layer, key)
            for key in sorted(keys, key=self.sampler.cost, reverse=True)
        }
        try:
            fitted = {key: tasks[key].result() for key in keys}
        finally:
            # A failed fit ends the run only once the others are done: none is left running.
            concurrent.futures.wait(tasks.values())
        return {key: fit for key, fit in fitted.items() if fit is not None}

    def _fit_layer(self, key: str) -> Any:
        with _one_torch_thread():
            return self.sampler.fit(key)

    def _draw_kept(
        self,
        pool: Executor,
        kept: list[tuple[int, ImageJob]],
        pending: list[ImageResult],
        record: Callable[[ImageResult], None],
    ) -> list[ImageResult]:
        """Draw the kept images' PCA pictures, one task per batch and layer in the render
        threads, and record the held images in order while later ones are drawn, up to the
        first image past the budget. Returns the images left to record."""
        fits, bands, todo = self.plan.pca, self.bands, self.plan.todo
        tasks: dict[int, tuple[int, list[tuple[int, Future[dict[int, str]]]]]] = {}
        for batch in _batches([(i, dataclasses.replace(job, pca=fits)) for i, job in kept]):
            # A layer a task: each layer's header, the same in all its pictures, is made by
            # its first batch's task (or by two at once, the same band, when a thread starts
            # on the next batch's before it is kept); the batch's images are drawn together.
            parts = _layer_tasks(pool, batch, bands)
            for i, _ in batch:
                tasks[id(todo[i])] = (i, parts)
        later = {id(todo[i]) for i, _ in self.later}
        try:
            for n, result in enumerate(pending):
                if id(result) in later:
                    return pending[n:]
                index, parts = tasks.get(id(result), (-1, []))
                for order, task in parts:
                    if (rel := task.result().get(index)) is not None:
                        _add_picture(result, order, rel)
                record(result)
            return []
        finally:
            # A failure (a picture, a record, Ctrl-C) ends the run once the pictures being
            # drawn are done, the others cancelled: none is left running.
            _cancel_rest({id(t): t for _, parts in tasks.values() for _, t in parts}.values())

    def _bands(self) -> Bands:
        """A store of the deflated bands PCA pictures share (each layer's header, each
        image's input). The kept images' inputs stay in it until their pictures are drawn:
        deflated, they are smaller than the inputs the pass keeps, and counted in those."""

        return Bands(level=self.png_level, row_filter="up")

    def _second_pass(
        self, forward: BatchForward, recorder: Any, stack: contextlib.ExitStack, pool: Executor
    ) -> None:
        assert self.rest is not None
        todo = self.plan.todo
        light = dict(self.later)
        for good, _logits, x in forward.batches([r.path for r in todo[self.rest :]], stack):
            captures = recorder.captures
            jobs = []
            for row, (i, _size, x_cpu) in enumerate(good):
                index = i + self.rest
                job = dataclasses.replace(
                    light[index], captures=captures, index=row, model_input=x_cpu
                )
                jobs.append((todo[index], job))
            del x
            self._draw(pool, jobs)
        self.later = []

    def _draw(self, pool: Executor, jobs: list[tuple[ImageResult, ImageJob]]) -> None:
        """Draw one batch's PCA pictures, a task per layer, and add them to its images."""
        fits = self.plan.pca
        batch = [(n, dataclasses.replace(j, pca=fits)) for n, (_, j) in enumerate(jobs)]
        if not batch:
            return
        parts = _layer_tasks(pool, batch, self._bands())
        try:
            for order, task in parts:
                for n, rel in task.result().items():
                    _add_picture(jobs[n][0], order, rel)
        finally:
            _cancel_rest(task for _, task in parts)


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch's linear algebra in one thread in this render thread (torch's OpenMP thread count
    is the calling thread's own), while numpy's BLAS is held to one thread for all of them.

    The render threads are the parallelism: a fit's BLAS or LAPACK spreading each product over
    every core as well oversubscribes them (resnet18's 20 fits take 0.41 s in two threads with
    two BLAS threads each, 0.25 s with one each; the whole run with --view pca went from 1.84x
    to about 1.45x a grids-only run)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def _blas() -> Any:
    """threadpoolctl's view of the BLAS libraries loaded (found once: about 6 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _add_picture(result: ImageResult, order: int, rel: str) -> None:
    layer = result.layers[order]
    result.layers[order] = dataclasses.replace(layer, pictures={**layer.pictures, _PCA.name: rel})


def _batches(jobs: list[tuple[int, ImageJob]]) -> list[list[tuple[int, ImageJob]]]:
    """Consecutive images of one batch (sharing its captures) together."""
    batches: list[list[tuple[int, ImageJob]]] = []
    for i, job in jobs:
        if batches and batches[-1][0][1].captures is job.captures:
            batches[-1].append((i, job))
        else:
            batches.append([(i, job)])
    return batches


def _layer_tasks(
    pool: Executor, batch: list[tuple[int, ImageJob]], bands: Bands
) -> list[tuple[int, Future[dict[int, str]]]]:
    """A task per layer drawing its pictures of the batch's images: ``(capture order,
    task)``."""
    orders = range(len(batch[0][1].captures))
    return [(order, pool.submit(_draw_pca_layer, batch, order, bands)) for order in orders]


def _cancel_rest(tasks: Iterable[Future[Any]]) -> None:
    """Cancel the tasks not started yet and wait for the others: none is left running."""
    every = list(tasks)
    for task in every:
        task.cancel()
    concurrent.futures.wait(every)


def _draw_pca_layer(batch: list[tuple[int, ImageJob]], order: int, bands: Bands) -> dict[int, str]:
    """The PCA pictures of the capture at ``order`` of a batch's images (``(key in bands,
    job)`` each), written: key -> file (relative to the output)."""
    job = batch[0][1]
    cap = job.captures[order]
    if cap.key not in job.pca:
        return {}
    width = output.order_width(len(job.captures))
    filename = output.layer_filename(order, cap.key, width=width)
    views = [layer_view(j, cap, filename) for _, j in batch]
    written = {}
    drawn = pca_pictures(views, bands, [i for i, _ in batch])
    for (i, j), view, picture in zip(batch, views, drawn, strict=True):
        if picture is None or picture.png is None:
            continue
        rel = j.folder / f"{view.stem}{_PCA.suffix}.png"
        output.write_bytes(j.out_dir / rel, picture.png)
        written[i] = rel.as_posix()
    return written


def _drawn(job: ImageJob) -> ImageJob:
    """The job as its PCA pictures need it: gradients and CAM maps are drawn already."""
    return dataclasses.replace(job, gradients={}, class_cams={})


def _light(job: ImageJob) -> ImageJob:
    """The job without its batch's tensors, for a second pass to fill in."""
    return dataclasses.replace(job, captures=[], gradients={}, class_cams={}, model_input=None)


def _nbytes(tensor: Any) -> int:
    return int(tensor.nbytes) if tensor is not None else 0
