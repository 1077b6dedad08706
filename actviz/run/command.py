"""``actviz run`` and ``actviz stats`` in named steps: open -> plan -> capture and draw -> write.

The CLI is a thin layer over :func:`run`; it returns a :class:`~actviz.run.result.RunResult`,
reports progress through an optional :class:`~actviz.command.Reporter`, and raises
:class:`~actviz.errors.ActvizError` subclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.options import from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.errors import UsageError
from actviz.results import ImageResult
from actviz.run.loop import Plan, capture_and_render
from actviz.run.manifest import manifest
from actviz.run.on_ray import stats_on_ray
from actviz.run.options import ALIASES, GROUPS, RunOptions
from actviz.run.records import RunRecords
from actviz.run.result import ImageRecords, RunCounts, RunResult
from actviz.run.sink import RunSink, loader, report_images

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command, Loaded
    from actviz.models import LoadedModel

__all__ = ["run"]


def run(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: RunOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> RunResult:
    """Run images through a model and write one feature-map grid PNG per selected layer.

    Args:
        model: A torchvision model name, ``package.module:factory`` /
            ``path/to/file.py:factory`` for the user's own model (runs that code), or an
            ``nn.Module`` object, used with its own weights and ImageNet's preprocessing
            unless ``preprocess`` says otherwise (given back in its training mode and device).
        inputs: An image file or folder, or a list of them (folders walked recursively).
        options: The run's options (:class:`~actviz.run.options.RunOptions`).
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, any option by its flat name (``layers``, ``out``,
            ``weights``, ``norm``, ``batch_size``, ``cam``, ...): every field of
            :class:`~actviz.run.options.RunOptions` and of its groups, and ``sort`` and
            ``channels`` as the command line names ``order`` and ``max_channels``.

    Returns:
        What was written, per image and layer.

    Raises:
        ActvizError: For every expected failure (unknown model, no images, empty selection,
            a value that is not one of an option's choices, ...); an unknown keyword, or
            keywords given together with ``options``, is a
            :class:`~actviz.command.options.KeywordError` (also a ``TypeError``).
    """
    from actviz.command import input_paths, open_command
    from actviz.command.inputs import discovery_for, inputs_for
    from actviz.command.progress import input_units
    from actviz.hooks import layer_refs
    from actviz.models.listing import fold_never_ran

    opts = from_flat(RunOptions, GROUPS, keywords, caller="run", given=options, aliases=ALIASES)
    ex = opts.execution
    # A run that fails before writing anything leaves no empty folder behind.
    with open_command(
        model,
        opts.out,
        reporter=reporter,
        inputs=inputs,
        resume=ex.resume,
        overwrite=ex.overwrite,
        engine=ex.engine,
        channels_last=ex.channels_last,
        discover=discovery_for(model),
    ) as cmd:
        assert cmd.found is not None  # open_command walked the inputs
        opened = cmd.load(
            opts.load, shows="The grids show", check=lambda m: _check_classifier(m, opts, cmd)
        )
        loaded = opened.model
        cmd.found = inputs_for(loaded, input_paths(inputs), cmd.found)
        _clip_options(loaded, opts)
        if loaded.family.key == "detection":
            from actviz.models.families import lower_score_threshold

            lower_score_threshold(loaded.module, opts.score_threshold)
        if opts.report:
            from actviz.report import warm_up

            warm_up()  # the report's templates, compiled while the images run
        selector, names = _select(cmd, loaded, opts)
        # The dictionary is checked against the model before anything is planned or written.
        features = _features(opts.sae, names, cmd, loaded) if opts.sae is not None else None
        state = _plan(cmd.model, loaded, selector, names, cmd.found, opts, cmd.notify)
        if features is not None:
            state.features = features
        if state.kept:
            shown = ", ".join(state.kept[:5]) + (", ..." if len(state.kept) > 5 else "")
            cmd.warn(f"--overwrite kept {len(state.kept)} file(s) no run wrote: {shown}")
        try:
            reused = (r for r in state.results if r.status == "reused")
            unit = input_units(loaded.family.key)[1]
            start_progress(cmd.notify, len(state.results), reused, unit=unit)
            if ex.engine == "ray":
                if opts.draw.pca:
                    raise UsageError("--view pca runs on the local engine; leave out --engine ray")
                never_ran = stats_on_ray(cmd.model, state.names, state.todo, state.sink, opts)
            else:
                never_ran = capture_and_render(cmd.model, loaded, state, opts, cmd.notify, cmd.warn)
        except BaseException:
            state.sink.abort()
            raise
        # What the selector swept in but the forward never called: one warning, and left out.
        refs = layer_refs(loaded.module)
        state.names, idle = fold_never_ran(refs, selector, state.names, never_ran)
        for message in idle:
            cmd.warn(message)
        if (note := _overlay_note(state.sink.counts, opts)) is not None:
            cmd.warn(note)
        return _write(cmd, opened, state, cmd.found.skipped, opts)


def _reuse(records: RunRecords, results: list[ImageResult]) -> None:
    """Mark the images an earlier run completed (same settings, files still there) as
    reused; their records stay in the ledger, where the run reads them when it needs them."""
    done = records.completed()
    for result in results:
        offset = done.get((str(result.path), result.out_dir.as_posix()))
        if offset is not None:
            result.status, result.record = "reused", offset


def _clip_options(loaded: LoadedModel, opts: RunOptions) -> None:
    """``frames`` for a video model's clips, ``flow_updates`` for a flow model's iterations."""
    from actviz.models.clips import ClipPreprocessing
    from actviz.models.families.optical_flow import flow_updates

    if opts.execution.engine == "ray" and loaded.family.key in ("video", "optical_flow"):
        raise UsageError(
            f"--engine ray runs image models; {loaded.name} takes "
            f"{'clips' if loaded.family.key == 'video' else 'pairs of images'}: leave it out"
        )
    if opts.frames is not None:
        if not isinstance(loaded.preprocess, ClipPreprocessing):
            raise UsageError(f"--frames is for video models; {loaded.name} takes no clips")
        loaded.preprocess = loaded.preprocess.with_frames(opts.frames)
    if opts.flow_updates is not None:
        if loaded.family.key != "optical_flow":
            raise UsageError(f"--flow-updates is for optical-flow models, not {loaded.name}")
        if opts.flow_updates < 1:
            raise UsageError(f"--flow-updates must be at least 1, not {opts.flow_updates}")
        flow_updates(loaded.module, opts.flow_updates)


def _check_classifier(loaded: LoadedModel, opts: RunOptions, cmd: Command) -> None:
    """A family without gradients, or a backbone without a classifier: no gradients to take,
    no predictions to record."""
    family = loaded.family
    if family.key == "detection" and opts.gradients.cam and not opts.gradients.grads:
        return  # EigenCAM and the Grad-CAM of one detection (detection_cam.png)
    if family.gradients is not None and opts.gradients.backward:
        flag = "--cam" if opts.gradients.cam else "--grads"
        raise UsageError(f"{flag} does not apply to {loaded.name}: {family.gradients}")
    if loaded.classifier or not family.classifies:  # a detector's output is read otherwise
        return
    if opts.gradients.backward:
        flag = "--cam" if opts.gradients.cam else "--grads"
        raise UsageError(
            f"{loaded.name} is a backbone without a classifier: there is no class score "
            f"for {flag} to explain; drop {flag} (grids and statistics work), or load a "
            "classifier"
        )
    cmd.warn(
        f"{loaded.name} is a backbone without a classifier: top-{opts.top_k} predictions "
        "are left out"
    )


def _features(path: Path, names: list[str], cmd: Command, loaded: LoadedModel) -> dict[str, Any]:
    """``--sae``: capture key -> the dictionary drawn in its place (on the CPU, where the
    grids are drawn).

    Raises:
        UsageError: When it was trained on another model, or its layer is not among the
            selected ones.
    """
    sae = cmd.dictionary(path, loaded)
    layer = sae.config.get("layer") or {}
    if layer.get("module") not in names:
        raise UsageError(
            f"--sae {path} was trained on {layer.get('key')}, which --layers does not select; "
            f"add it (--layers {layer.get('module')})"
        )
    return {str(layer.get("key")): sae}


def _dictionary(path: Path | None, features: dict[str, Any] | None) -> dict[str, Any] | None:
    """``--sae`` as the manifest names it: the file, the layer drawn as its features, their
    number and k, and the model it was trained on."""
    if path is None or not features:
        return None
    (key, sae), *_ = features.items()
    return {
        "file": str(path),
        "layer": key,
        "features": sae.features,
        "k": sae.k,
        "trained_on": sae.config.get("model"),
    }


def _select(cmd: Command, loaded: LoadedModel, opts: RunOptions) -> tuple[str, list[str]]:
    """The selector (the architecture's default when none was given) and the modules it names."""
    default = None
    if opts.layers is None and opts.sae is not None:  # the dictionary's own layer
        from actviz.dictionary import load_sae

        default = str((load_sae(opts.sae).config.get("layer") or {}).get("module"))
    if opts.layers is None and opts.capture == "attn":  # from the attention modules
        from actviz.attention import attention_selector

        default = attention_selector(loaded.module)
    return cmd.select(loaded, opts.layers, default=default)


def _plan(
    model: str,
    loaded: LoadedModel,
    selector: str,
    names: list[str],
    found: Any,
    opts: RunOptions,
    notify: Reporter,
) -> Plan:
    """Output folders per image, the resume records, and which images are still to draw."""
    from actviz.layouts import layer_contexts

    module = loaded.module  # in the run's memory format already
    contexts = layer_contexts(module, loaded.input_size)
    _check_overlay_channel(opts, module, names, contexts)
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
        + ([grads.cam_method] if grads.cam_method != "gradcam" else []),
        **({"sae": str(opts.sae)} if opts.sae is not None else {}),
    }
    frames = getattr(loaded.preprocess, "frames", None)
    if frames is not None or opts.flow_updates is not None:  # a clip's length, flow's updates
        settings["clip"] = [frames, opts.flow_updates]
    if loaded.family.key == "detection":  # the detections an earlier run recorded
        settings["score_threshold"] = opts.score_threshold
        settings["detection"] = opts.detection
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
            thresholds=opts.thresholds,
            random=loaded.weights.random,
            resume=results if opts.execution.resume else None,
        ),
        kept=[p.relative_to(opts.out).as_posix() for p in kept],
    )


def _check_overlay_channel(
    opts: RunOptions, module: nn.Module, names: list[str], contexts: Any
) -> None:
    """Refuse an ``overlay_channel`` no selected layer has: every overlay would be left out,
    and the run would succeed with none written. Only a leaf module's own channel count
    (``out_channels``, ``num_features``, ...) is taken as known: a container's output may
    concatenate its branches; any layer not known gets the benefit of the doubt."""
    channel = opts.draw.overlay_channel
    if channel is None or opts.capture != "output" or not names:
        return
    counts = [
        None
        if next(iter(module.get_submodule(name).children()), None) is not None
        else getattr(contexts.get(name), "channels_hint", None)
        for name in names
    ]
    if any(count is None or count > channel for count in counts):
        return
    most = max(c for c in counts if c is not None)
    raise UsageError(
        f"--overlay-channel {channel}: the selected layers have at most {most} channels "
        f"(0-{most - 1}); pick one below {most}"
    )


def _overlay_note(counts: RunCounts, opts: RunOptions) -> str | None:
    """Which layers got no overlay, when ``overlay_channel`` asked for a channel they do not
    have: every layer drawn (a container's channels are known only once it ran, see
    :func:`_check_overlay_channel`, so the run cannot refuse it before it starts), or some of
    them, whose grids were drawn without one."""
    channel = opts.draw.overlay_channel
    if channel is None:
        return None
    narrow = {key: n for key, n in counts.channels.items() if 0 < n <= channel}
    if not narrow:
        return None
    most = max(narrow.values())
    shown = ", ".join(f"{key} {n}" for key, n in list(narrow.items())[:3])
    more = ", ..." if len(narrow) > 3 else ""
    if not counts.overlays:
        return (
            f"--overlay-channel {channel}: no overlay was written, as no layer drawn has that "
            f"channel (channels: {shown}{more}); pick one below {most}"
        )
    return (
        f"--overlay-channel {channel}: {len(narrow)} of {len(counts.channels)} layers drawn "
        f"have no such channel and got no overlay (channels: {shown}{more}); pick one below "
        f"{min(narrow.values())} for an overlay of every layer"
    )


def _write(
    cmd: Command,
    opened: Loaded,
    plan: Plan,
    skipped: list[tuple[Path, str]],
    opts: RunOptions,
) -> RunResult:
    """Statistics, flow chart, manifest and report: the files about the whole run."""

    loaded = opened.model
    out_dir, ex, sink = opts.out, opts.execution, plan.sink
    try:
        # The reused images count in the summaries and the table as in a clean run; read
        # back after the new ones, so that a resume starts at once whatever the ledger's size.
        sink.replay(plan.results)
        stats_doc = sink.finish()
        gradient_flow = sink.gradient_flow_chart() if opts.gradients.grads else None
    except BaseException:
        sink.abort()
        raise
    manifest_path = out_dir / "manifest.json"
    result = RunResult(
        model=cmd.model,
        weights=loaded.weights,
        model_info=loaded.record(),
        device=str(loaded.device),
        selector=plan.selector,
        layers=plan.names,
        out=out_dir,
        images=ImageRecords(plan.results, loader(sink.records)),
        skipped=skipped,
        seconds=cmd.seconds(),
        manifest=manifest_path,
        warnings=cmd.warnings,
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
            "sae": _dictionary(opts.sae, plan.features),
        },
        render=opts.draw.describe(),
        stats=stats_doc,
        report=out_dir / "index.html" if opts.report else None,
        gradient_flow=gradient_flow,
        pca={key: fit.describe() for key, fit in plan.pca.items()},
        weights_warning=opened.warning,
        counts=sink.counts,
        notes=sink.notes_list,
        undrawable=sink.undrawable,
    )
    record = manifest(result)
    output.write_json(manifest_path, record)
    if opts.report:
        from actviz.report import build_report, related_reports

        related = related_reports(out_dir)
        shown = report_images(sink, plan.results, stats_doc, folders=opts.draw.grids)
        pages = build_report(record, stats_doc, shown, out_dir_name=out_dir.name, related=related)
        for rel, data in pages:  # made and written one at a time
            output.write_bytes(out_dir / rel, data)
    return result
