"""``top_images``: load -> select -> plan -> one streamed pass -> draw -> write.

The pass over the folder keeps a running top-k per channel (:class:`~actviz.examples.topk.TopK`)
fed by each batch's candidates, which the forward hooks compute on the device
(:mod:`actviz.examples.scoring`); memory does not grow with the folder. The state is saved
every few seconds and when the run is interrupted, so ``--resume`` continues where it stopped
and ends with the same ``top-images.json`` as an uninterrupted run. Then the images the top-k
chose are read once more for the pictures (:mod:`actviz.examples.draw`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.examples.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from actviz.examples.document import SHOWN, LayerFiles, document, selectivity
from actviz.examples.draw import ViewCache, draw_layers, layer_files
from actviz.examples.options import ExamplesOptions
from actviz.examples.plan import LayerPlan, Planned, plan_layers
from actviz.examples.results import LayerSummary, TopImagesResult
from actviz.examples.topk import Candidates, TopK
from actviz.results import ImageResult, Reporter, SilentReporter

if TYPE_CHECKING:
    from torch import nn

    from actviz.models import LoadedModel

__all__ = ["JSON_FILE", "REPORT_FILE", "top_images"]

JSON_FILE = "top-images.json"
REPORT_FILE = "top-images.html"
#: Seconds between two saves of the state during the pass (and always on interruption).
CHECKPOINT_SECONDS = 5.0


def top_images(
    model: str | nn.Module,
    inputs: Sequence[Path | str],
    options: ExamplesOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> TopImagesResult:
    """Find, for every channel of the selected layers, the images of a folder that excite it
    most, and draw them.

    One streamed pass: each channel keeps its ``k`` best images by the spatial maximum (or
    mean) of its map, ties broken by path, so the result does not depend on batch size or
    order. Writes ``top-images.json``, a contact sheet per channel and an overview per layer
    under ``top-images/``, and the HTML pages.

    Args:
        model: A torchvision model name, ``package.module:factory`` /
            ``path/to/file.py:factory`` for the user's own model (runs that code), or an
            ``nn.Module`` object, used with its own weights and ImageNet's preprocessing
            unless ``preprocess`` says otherwise (given back in its training mode and device).
        inputs: Image files and/or folders (walked recursively).
        options: The options (:class:`~actviz.examples.options.ExamplesOptions`).
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, any option by its flat name (``layers``, ``out``,
            ``k``, ``score``, ``channels``, ``weights``, ``batch_size``, ``resume``, ...).

    Returns:
        What was found and written.

    Raises:
        ActvizError: For every expected failure (unknown model, empty selection, a selection
            with nothing to rank, a resume with other settings, ...).
        TypeError: For an unknown keyword, or keywords given together with ``options``.
    """
    from actviz import output, session

    if options is not None and keywords:
        raise TypeError("pass either options or keywords, not both")
    opts = options or ExamplesOptions.from_keywords(**keywords)
    session.check_engine(model, opts.execution.engine)
    given, model = model, session.model_label(model)
    started = time.perf_counter()
    notify = reporter or SilentReporter()
    found = session.find_inputs(inputs)
    if not found.images:
        named = ", ".join(str(p) for p in inputs) or "(none)"
        raise UsageError(
            f"no images found in {named}; give image files or folders that hold some "
            f"({len(found.skipped)} other file(s) skipped)"
        )
    ex = opts.execution
    with (
        output.opened(opts.out, resume=ex.resume, overwrite=ex.overwrite),
        session.restoring(given),
    ):
        warnings: list[str] = []
        opened = session.load(given, opts.load, notify, warnings, shows="The top images show")
        loaded = opened.model
        selector, names = _select(model, loaded, opts)
        module = session.in_memory_format(loaded.module, ex.channels_last)
        planned = _plan(model, loaded, module, names, opts)
        for name in planned.never_ran:
            warnings.append(f"layer {name} was selected but never ran in the forward pass")
            notify.warn(warnings[-1])
        plans = list(planned.plans.values())
        settings = {
            "model": model,
            "weights": loaded.weights.name or loaded.weights.source,
            "layers": [plan.key for plan in plans],
            "input_size": list(loaded.input_size),
            **opts.settings(),
        }
        if ex.overwrite:
            _remove_outputs(opts.out)
        earlier = load_checkpoint(opts.out, settings) if ex.resume else None
        todo = _todo([item.path for item in found.images], earlier, opts.out, notify)
        progress = _Progress(opts.out, settings, opts.k, earlier)
        views = ViewCache(loaded)
        try:
            _stream(model, loaded, module, names, planned, todo, progress, views, opts, notify)
        finally:
            progress.ledger.close()
        if progress.resized:
            warnings.append(_resized_warning(loaded, progress))
            notify.warn(warnings[-1])
        top = progress.top
        report = opts.out / REPORT_FILE if opts.report else None
        written: dict[str, Any] = {}

        def write_documents() -> None:
            # While the last pictures are encoded: their names are known already.
            doc = document(
                model=model,
                weights=session.weights_record(loaded.weights, opened.warning),
                model_info=loaded.record(),
                device=str(loaded.device),
                selector=selector,
                k=opts.k,
                score=opts.score,
                input_size=loaded.input_size,
                images=top.images,
                failed=progress.failed.shown(),
                failed_count=progress.failed.count,
                skipped=found.skipped,
                plans=plans,
                tops=top.layers,
                files=layer_files(plans, top.layers),
                categories=loaded.categories,
                unranked=planned.skipped,
                warnings=warnings,
                report=REPORT_FILE if report is not None else None,
            )
            output.write_json(opts.out / JSON_FILE, doc)
            if report is not None:
                from actviz.report import build_examples_report, rebuild_run_report

                for rel, data in build_examples_report(doc, opts.out).items():
                    output.write_bytes(opts.out / rel, data)
                # A run's report in the same folder now links these pages.
                for rel, data in rebuild_run_report(opts.out).items():
                    output.write_bytes(opts.out / rel, data)
            written["doc"] = doc

        files = _draw(opts, plans, top, loaded, warnings, notify, views, write_documents)
        doc = written["doc"]
        return TopImagesResult(
            model=model,
            weights=loaded.weights,
            device=str(loaded.device),
            selector=selector,
            k=opts.k,
            score=opts.score,
            out=opts.out,
            json=opts.out / JSON_FILE,
            report=report,
            images=top.images,
            reused=progress.reused,
            failed=progress.failed.shown(),
            failed_count=progress.failed.count,
            skipped=list(found.skipped),
            layers=_summaries(plans, top, files, loaded.categories),
            unranked=list(planned.skipped),
            warnings=warnings,
            seconds=time.perf_counter() - started,
            document=doc,
        )


def _select(model: str, loaded: LoadedModel, opts: ExamplesOptions) -> tuple[str, list[str]]:
    """The selector and the modules it names; without one, the deepest layer of the
    architecture's default selection (the last convolution, encoder block or stage)."""
    from actviz import session

    selector, names = session.select(model, loaded, opts.layers)
    if opts.layers is not None:
        return selector, names
    return names[-1], names[-1:]


def _plan(
    model: str, loaded: LoadedModel, module: Any, names: list[str], opts: ExamplesOptions
) -> Planned:
    from actviz.layouts import layer_contexts

    planned = plan_layers(
        module,
        names,
        layer_contexts(module, loaded.input_size),
        input_size=loaded.input_size,
        in_chans=opts.load.in_chans,
        device=loaded.device,
        model_name=model,
    )
    if not planned.plans:
        reasons = "; ".join(f"{key}: {why}" for key, why in planned.skipped[:3]) or (
            "the selected layers never ran"
        )
        raise UsageError(
            f"none of the selected layers has channels to rank ({reasons}); "
            f"choose layers with (C, H, W), token or vector outputs (actviz list-layers {model})"
        )
    return planned


def _todo(paths: list[Path], earlier: Checkpoint | None, out: Path, notify: Reporter) -> list[Path]:
    """The images still to score, the earlier run's reported as reused.

    The done images are streamed from the ledger twice (to count, then to report) and matched
    by 64-bit string hash, so resuming holds 8 bytes per image, never a set of paths. Two
    different paths hashing alike is about one chance in 10**7 at a million images.
    """
    import numpy as np

    if earlier is None:
        notify.start(len(paths))
        return paths
    done = np.unique(np.fromiter((hash(p) for p in earlier.paths(out)), np.int64))
    mine = np.fromiter((hash(str(p)) for p in paths), np.int64, len(paths))
    left = ~np.isin(mine, done)
    del mine, done
    todo = [p for p, keep in zip(paths, left.tolist(), strict=True) if keep]
    notify.start(len(todo) + earlier.images)
    for path in earlier.paths(out):
        notify.advance(ImageResult(path=Path(path), out_dir=PurePosixPath("."), status="reused"))
    return todo


@dataclass(frozen=True)
class _State:
    top: TopK
    images: int  # images merged into ``top``, the earlier run's included
    ledger_bytes: int  # the length of the ledger that lists them


class _Failures:
    """Images that could not be scored: a count, and the first ``SHOWN`` by path
    (each one is also reported as it fails), so a folder of broken files costs no memory."""

    def __init__(self) -> None:
        self.count = 0
        self._kept: list[tuple[Path, str]] = []

    def add(self, path: Path, reason: str) -> None:
        import bisect

        self.count += 1
        bisect.insort(self._kept, (path, reason))
        del self._kept[SHOWN:]

    def shown(self) -> list[tuple[Path, str]]:
        """The first ``SHOWN`` failures by path."""
        return list(self._kept)


class _Progress:
    """The accumulator and the ledger of the images it holds, saved together.

    A batch's paths are appended to the ledger first; then one assignment makes the state that
    includes them current. An interruption between the two leaves the extra line out of what
    is saved (the state records the ledger's length), so a saved state and its list of done
    images always agree.
    """

    def __init__(
        self, out: Path, settings: dict[str, Any], k: int, earlier: Checkpoint | None
    ) -> None:
        from actviz.examples.checkpoint import Ledger

        self.out = out
        self.settings = settings
        self.ledger = Ledger(out, earlier)
        self.reused = earlier.images if earlier is not None else 0
        top = earlier.top if earlier is not None else TopK(k)
        self.state = _State(top, self.reused, self.ledger.size)
        self.saved: _State | None = None
        self.failed = _Failures()
        self.last_save = time.monotonic()
        self.resized = 0  # images scored on maps pooled to the planned size
        self.resized_layers: dict[str, tuple[int, ...]] = {}

    @property
    def top(self) -> TopK:
        return self.state.top

    def add(self, paths: list[str], top: TopK) -> None:
        end = self.ledger.append(paths)
        self.state = _State(top, self.state.images + len(paths), end)

    def fail(self, path: Path, error: str | None, notify: Reporter) -> None:
        """An image that could not be scored: named, counted, skipped."""
        reason = error or "unreadable"
        self.failed.add(path, reason)
        notify.advance(ImageResult(path, PurePosixPath("."), status="failed", error=reason))

    def merge(
        self,
        paths: list[Path],
        sizes: Sequence[tuple[int, int] | None],
        candidates: Candidates,
        notify: Reporter,
    ) -> None:
        """One batch's candidates into the top-k; saved every few seconds."""
        self.add([str(p) for p in paths], self.top.updated(candidates))
        for path, size in zip(paths, sizes, strict=True):
            notify.advance(ImageResult(path, PurePosixPath("."), size=size))
        if time.monotonic() - self.last_save >= CHECKPOINT_SECONDS:
            self.save()

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Save at the end of the pass, and when it stops early: --resume continues there."""
        try:
            yield
        except BaseException:
            # A failing save must not hide the first error.
            with contextlib.suppress(Exception):
                self.save()
            raise
        self.save()

    def save(self) -> None:
        state = self.state
        if state is self.saved or state.images == self.reused:
            return  # nothing new; and a run that scored nothing leaves no state behind
        self.ledger.flush()  # the lines the state covers are on disk before it
        save_checkpoint(
            self.out,
            self.settings,
            state.top,
            images=state.images,
            ledger_bytes=state.ledger_bytes,
        )
        self.saved = state
        self.last_save = time.monotonic()


def _stream(
    model: str,
    loaded: LoadedModel,
    module: Any,
    names: list[str],
    planned: Planned,
    todo: list[Path],
    progress: _Progress,
    views: ViewCache,
    opts: ExamplesOptions,
    notify: Reporter,
) -> None:
    """The one pass over the images still to score; the views of images that made some
    top-k are kept for the pictures while they fit."""
    from actviz.examples.scoring import ScoreRecorder, batch_candidates, predicted_classes
    from actviz.forward import BatchForward
    from actviz.hooks import eval_mode

    ex = opts.execution
    if ex.engine == "ray":
        _stream_on_ray(model, names, planned, todo, progress, opts, notify)
        return
    forward = BatchForward(loaded, module, ex.batch_size, ex.workers, ex.amp, ex.channels_last)

    def failed(index: int, error: str | None) -> None:
        progress.fail(todo[index], error, notify)

    with (
        ScoreRecorder(module, names, planned.plans, opts.score) as recorder,
        eval_mode(module),
        contextlib.ExitStack() as stack,
        progress.saving(),
    ):
        for good, logits, _x in forward.batches(todo, stack, failed):
            paths = [todo[index] for index, _, _ in good]
            scores = recorder.take()
            if recorder.unfit:
                # Never counted as scored: each image fails by name, with the fix.
                key, shape = next(iter(recorder.unfit.items()))
                reason = (
                    f"its output of {key} is {shape}, not {planned.plans[key].shape} as at "
                    f"the input size {loaded.input_size[0]}x{loaded.input_size[1]}, and cannot "
                    "be brought to it; pass --input-size H,W to crop every image to one size"
                )
                for path in paths:
                    progress.fail(path, reason, notify)
                continue
            if recorder.resized:
                progress.resized += len(paths)
                progress.resized_layers.update(recorder.resized)
            # A backbone's output is features, not class scores: no predicted class.
            classes = predicted_classes(logits if loaded.classifier else None, len(good))
            candidates = batch_candidates([str(p) for p in paths], scores, classes, opts.k)
            progress.merge(paths, [size for _, size, _ in good], candidates, notify)
            views.offer(
                zip([str(p) for p in paths], [x for _, _, x in good], strict=True),
                progress.top.paths(),
            )


def _resized_warning(loaded: LoadedModel, progress: _Progress) -> str:
    """Which images were scored at the planned map size, how, and how to avoid it."""
    height, width = loaded.input_size
    keys = sorted(progress.resized_layers)
    shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return (
        f"{progress.resized} image(s) gave maps of another size than at the input size "
        f"{height}x{width} ({loaded.name}'s preprocessing keeps each image's aspect ratio): "
        f"their maps of {shown} were scored at the planned size, resized by adaptive max "
        "pooling (maxima and means exact, locations on the planned grid), and their crops "
        f"cut from the image resized to {height}x{width}; pass --input-size H,W to crop "
        "every image to one size"
    )


def _stream_on_ray(
    model: str,
    names: list[str],
    planned: Planned,
    todo: list[Path],
    progress: _Progress,
    opts: ExamplesOptions,
    notify: Reporter,
) -> None:
    """The same pass on a pool of Ray actors: each batch's candidates merged as they come
    back. The pictures decode the chosen images again (no views travel back)."""
    from actviz.examples.on_ray import candidates_on_ray

    pairs = candidates_on_ray(
        model,
        opts.load,
        opts.execution,
        names,
        planned.plans,
        todo,
        score=opts.score,
        k=opts.k,
    )
    with progress.saving():
        for indices, back in pairs:
            if back.candidates is None:
                progress.fail(todo[indices[0]], back.error, notify)
            else:
                paths = [todo[i] for i in indices]
                progress.merge(paths, back.sizes, back.candidates, notify)


def _draw(
    opts: ExamplesOptions,
    plans: list[LayerPlan],
    top: TopK,
    loaded: LoadedModel,
    warnings: list[str],
    notify: Reporter,
    views: ViewCache,
    meanwhile: Callable[[], None],
) -> dict[str, LayerFiles]:
    def warn(message: str) -> None:
        warnings.append(message)
        notify.warn(message)

    return draw_layers(
        opts.out,
        plans,
        top.layers,
        loaded,
        opts,
        categories=loaded.categories,
        warn=warn,
        views=views.views,
        meanwhile=meanwhile,
    )


def _summaries(
    plans: list[LayerPlan],
    top: TopK,
    files: dict[str, LayerFiles],
    categories: Sequence[str] | None,
) -> list[LayerSummary]:
    summaries = []
    for plan in plans:
        layer = top.layers.get(plan.key)
        if layer is None:
            continue
        best = None
        for c in range(layer.channels):
            chosen = selectivity(layer, c, categories)
            if chosen is not None and (best is None or chosen.count > best[1].count):
                best = (c, chosen)
        summaries.append(
            LayerSummary(
                key=plan.key,
                channels=layer.channels,
                dead=int((layer.active == 0).sum()) if plan.judges_dead else 0,
                dead_judged=plan.judges_dead,
                selective_channel=best[0] if best else None,
                selective_class=best[1].index if best else None,
                selective_label=best[1].label if best else None,
                selective_count=best[1].count if best else 0,
                top_count=int(layer.valid[best[0]].sum()) if best else 0,
                overview=files[plan.key].overview if plan.key in files else None,
            )
        )
    return summaries


def _remove_outputs(out: Path) -> None:
    """``--overwrite``: remove what an earlier top-images run wrote, and nothing else."""
    from actviz import output
    from actviz.examples.checkpoint import FILE, LEDGER

    folder = out / "top-images"
    pictures = (
        [p.relative_to(out).as_posix() for p in folder.rglob("*") if p.suffix in (".png", ".html")]
        if folder.is_dir()
        else []
    )
    output.remove_written(
        out, [FILE, LEDGER, JSON_FILE, REPORT_FILE, *pictures], prune=["top-images"]
    )
