"""``top_images``: load -> select -> plan -> one streamed pass -> draw -> write.

The pass over the folder keeps a running top-k per channel (:class:`~actviz.top_images.topk.TopK`)
fed by each batch's candidates, which the forward hooks compute on the device
(:mod:`actviz.top_images.scoring`); memory does not grow with the folder. The state is saved
every few seconds and when the run is interrupted, so ``--resume`` continues where it stopped
and ends with the same ``top-images.json`` as an uninterrupted run. Then the images the top-k
chose are read once more for the pictures (:mod:`actviz.top_images.draw`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command import open_command
from actviz.command.forward import BatchForward
from actviz.command.opening import CommandSpec
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter
from actviz.command.session import weights_record
from actviz.errors import UsageError
from actviz.hooks import eval_mode
from actviz.report import build_top_images_report, rebuild_run_report
from actviz.top_images.checkpoint import FILE, LEDGER, load_checkpoint
from actviz.top_images.document import LayerFiles, document, selectivity
from actviz.top_images.draw import ViewCache, draw_layers, layer_files
from actviz.top_images.features import dictionary_layer, feature_plans
from actviz.top_images.on_ray import candidates_on_ray
from actviz.top_images.options import TopImagesOptions
from actviz.top_images.plan import LayerPlan, Planned, plan_loaded
from actviz.top_images.progress import Progress, still_to_score
from actviz.top_images.results import LayerSummary, TopImagesResult
from actviz.top_images.scoring import (
    ScoreRecorder,
    batch_candidates,
    predicted_classes,
    unfit_reason,
)
from actviz.top_images.topk import TopK

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command, Loaded
    from actviz.models import LoadedModel
    from actviz.top_images.features import Transform

__all__ = ["JSON_FILE", "REPORT_FILE", "top_images"]

SPEC = CommandSpec("top-images", ray=True)

JSON_FILE = "top-images.json"
REPORT_FILE = "top-images.html"


def top_images(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: TopImagesOptions | None = None,
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

    Takes ``model``, ``inputs``, ``reporter`` and flat keywords as :func:`actviz.run` does,
    and :class:`~actviz.top_images.options.TopImagesOptions`.

    Raises:
        ActvizError: For every expected failure (unknown model, empty selection, a selection
            with nothing to rank, a resume with other settings, ...).
        TypeError: For an unknown keyword, or keywords given together with ``options``.
    """

    opts = from_flat(TopImagesOptions, COMMON_GROUPS, keywords, caller="top_images", given=options)
    ex = opts.execution

    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=inputs) as cmd:
        assert cmd.found is not None  # open_command walked the inputs
        opened = cmd.load(opts.load, shows="The top images show")
        loaded = opened.model
        transforms = None
        if opts.sae is not None:
            if ex.engine != "local":
                raise UsageError("--sae ranks features in this process: drop --engine ray")
            dictionary = cmd.dictionary(opts.sae, loaded, loaded.device)
            key, module_name = dictionary_layer(dictionary)
            selector, names = cmd.select(loaded, opts.layers or module_name)
            planned = _plan(cmd.model, loaded, names, opts)
            transforms = feature_plans(planned, dictionary, key, opts.sae)
        else:
            selector, names = cmd.deepest(loaded, opts.layers)
            planned = _plan(cmd.model, loaded, names, opts)
        for name in planned.never_ran:
            cmd.warn(f"layer {name} was selected but never ran in the forward pass")
        plans = list(planned.plans.values())
        settings = {
            "model": cmd.model,
            "weights": loaded.weights.name or loaded.weights.source,
            "layers": [plan.key for plan in plans],
            "input_size": list(loaded.input_size),
            **opts.settings(),
        }
        if ex.overwrite:
            _remove_outputs(opts.out)
        earlier = load_checkpoint(opts.out, settings) if ex.resume else None
        paths = [item.path for item in cmd.found.images]
        todo = still_to_score(paths, earlier, opts.out, cmd.notify)
        progress = Progress(opts.out, settings, opts.k, earlier)
        views = ViewCache(loaded)
        try:
            _stream(
                cmd.model,
                loaded,
                names,
                planned,
                todo,
                progress,
                views,
                opts,
                cmd.notify,
                transforms,
            )
        finally:
            progress.ledger.close()
        if progress.resized:
            cmd.warn(_resized_warning(loaded, progress))
        top = progress.top
        report = opts.out / REPORT_FILE if opts.report else None
        written: dict[str, Any] = {}

        def write_documents() -> None:
            # While the last pictures are encoded: their names are known already.
            written["doc"] = _write_documents(
                cmd, opened, selector, plans, planned, progress, opts, report
            )

        files = draw_layers(
            opts.out,
            plans,
            top.layers,
            loaded,
            opts,
            categories=loaded.categories,
            warn=cmd.warn,
            views=views.views,
            meanwhile=write_documents,
        )
        return TopImagesResult(
            model=cmd.model,
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
            skipped=list(cmd.found.skipped),
            layers=_summaries(plans, top, files, loaded.categories),
            unranked=list(planned.skipped),
            warnings=cmd.warnings,
            seconds=cmd.seconds(),
            document=written["doc"],
        )


def _write_documents(
    cmd: Command,
    opened: Loaded,
    selector: str,
    plans: list[LayerPlan],
    planned: Planned,
    progress: Progress,
    opts: TopImagesOptions,
    report: Path | None,
) -> dict[str, Any]:
    """``top-images.json`` and, with ``report``, the pages (and the run's report in the same
    folder, which now links them); the document written."""

    assert cmd.found is not None  # open_command walked the inputs
    loaded, top = opened.model, progress.top
    doc = document(
        model=cmd.model,
        weights=weights_record(loaded.weights, opened.warning),
        model_info=loaded.record(),
        device=str(loaded.device),
        selector=selector,
        k=opts.k,
        score=opts.score,
        input_size=loaded.input_size,
        images=top.images,
        failed=progress.failed.shown(),
        failed_count=progress.failed.count,
        skipped=cmd.found.skipped,
        plans=plans,
        tops=top.layers,
        files=layer_files(plans, top.layers),
        categories=loaded.categories,
        unranked=planned.skipped,
        warnings=cmd.warnings,
        report=REPORT_FILE if report is not None else None,
    )
    output.write_json(opts.out / JSON_FILE, doc)
    if report is not None:
        for rel, data in build_top_images_report(doc, opts.out).items():
            output.write_bytes(opts.out / rel, data)
        # Then a run's report in the same folder links these pages, now that they exist.
        for rel, data in rebuild_run_report(opts.out).items():
            output.write_bytes(opts.out / rel, data)
    return doc


def _plan(model: str, loaded: LoadedModel, names: list[str], opts: TopImagesOptions) -> Planned:
    planned = plan_loaded(loaded, names, in_chans=opts.load.in_chans, model_name=model)
    if not planned.plans:
        reasons = "; ".join(f"{key}: {why}" for key, why in planned.skipped[:3]) or (
            "the selected layers never ran"
        )
        raise UsageError(
            f"none of the selected layers has channels to rank ({reasons}); "
            f"choose layers with (C, H, W), token or vector outputs (actviz list-layers {model})"
        )
    return planned


def _stream(
    model: str,
    loaded: LoadedModel,
    names: list[str],
    planned: Planned,
    todo: list[Path],
    progress: Progress,
    views: ViewCache,
    opts: TopImagesOptions,
    notify: Reporter,
    transforms: Mapping[str, Transform] | None = None,
) -> None:
    """The one pass over the images still to score; the views of images that made some
    top-k are kept for the pictures while they fit."""

    ex, module = opts.execution, loaded.module
    if ex.engine == "ray":
        _stream_on_ray(model, names, planned, todo, progress, opts, notify)
        return
    forward = BatchForward(loaded, module, ex)

    def failed(index: int, error: str | None) -> None:
        progress.fail(todo[index], error, notify)

    with (
        ScoreRecorder(module, names, planned.plans, opts.score, transforms) as recorder,
        eval_mode(module),
        contextlib.ExitStack() as stack,
        progress.saving(),
    ):
        for good, logits, _x in forward.batches(todo, stack, failed):
            paths = [todo[index] for index, _, _ in good]
            scores = recorder.take()
            if recorder.unfit:
                # Never counted as scored: each image fails by name, with the fix.
                reason = unfit_reason(
                    recorder.unfit, planned.plans, loaded.input_size, loaded.family.one_size
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


def _resized_warning(loaded: LoadedModel, progress: Progress) -> str:
    """Which images were scored at the planned map size, how, and how to avoid it."""
    height, width = loaded.input_size
    keys = sorted(progress.resized_layers)
    shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return (
        f"{progress.resized} image(s) gave maps of another size than at the input size "
        f"{height}x{width} ({loaded.name}'s preprocessing keeps each image's aspect ratio): "
        f"their maps of {shown} were scored at the planned size, resized by adaptive max "
        "pooling (maxima and means exact, locations on the planned grid), and their crops "
        f"cut from the image resized to {height}x{width}; {loaded.family.one_size}"
    )


def _stream_on_ray(
    model: str,
    names: list[str],
    planned: Planned,
    todo: list[Path],
    progress: Progress,
    opts: TopImagesOptions,
    notify: Reporter,
) -> None:
    """The same pass on a pool of Ray actors: each batch's candidates merged as they come
    back. The pictures decode the chosen images again (no views travel back)."""

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
                if back.resized:
                    progress.resized += len(paths)
                    progress.resized_layers.update(back.resized)
                progress.merge(paths, back.sizes, back.candidates, notify)


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
        seen, judged = set(), 0
        for c in range(layer.channels):
            chosen = selectivity(layer, c, categories, judged=plan.judges_dead)
            if chosen is None:
                continue
            judged += 1
            seen.add((chosen.index, chosen.count))
            if best is None or chosen.count > best[1].count:
                best = (c, chosen)
        if len(seen) == 1 and judged > 1:
            best = None  # every channel alike (one class for every image): none stands out
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
                unit="feature" if plan.layout == "features" else "channel",
            )
        )
    return summaries


def _remove_outputs(out: Path) -> None:
    """``--overwrite``: remove what an earlier top-images run wrote, and nothing else."""

    folder = out / "top-images"
    pictures = (
        [p.relative_to(out).as_posix() for p in folder.rglob("*") if p.suffix in (".png", ".html")]
        if folder.is_dir()
        else []
    )
    output.remove_written(
        out, [FILE, LEDGER, JSON_FILE, REPORT_FILE, *pictures], prune=["top-images"]
    )
