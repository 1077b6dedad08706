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
from actviz.attention import attention_selector
from actviz.command import input_paths, open_command
from actviz.command.inputs import discovery_for, inputs_for
from actviz.command.opening import CommandSpec
from actviz.command.options import from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.dictionary import load_dictionary
from actviz.errors import UsageError
from actviz.gradients.registry import DEFAULT_CAM
from actviz.hooks import layer_refs
from actviz.models.listing import fold_never_ran
from actviz.report import build_report, related_reports, warm_up
from actviz.run.families import RUN_FAMILIES, run_family
from actviz.run.loop import capture_and_render
from actviz.run.manifest import manifest
from actviz.run.on_ray import stats_on_ray
from actviz.run.options import ALIASES, GROUPS, RunOptions
from actviz.run.plan import Plan, plan
from actviz.run.result import ImageRecords, RunCounts, RunResult
from actviz.run.sink import loader, report_images

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command, Loaded
    from actviz.models import LoadedModel

__all__ = ["run"]

SPEC = CommandSpec(ray=True)


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

    opts = from_flat(RunOptions, GROUPS, keywords, caller="run", given=options, aliases=ALIASES)
    ex = opts.execution
    # A run that fails before writing anything leaves no empty folder behind.
    with open_command(
        model,
        opts.out,
        SPEC,
        ex,
        reporter=reporter,
        inputs=inputs,
        discover=discovery_for(model),
    ) as cmd:
        opened = _open_model(cmd, inputs, opts)
        loaded = opened.model
        selector, names = _select(cmd, loaded, opts)
        # The dictionary is checked against the model before anything is planned or written.
        features = _features(opts.sae, names, cmd, loaded) if opts.sae is not None else None
        state = plan(cmd.model, loaded, selector, names, cmd.found, opts, cmd.notify)
        if features is not None:
            state.features = features
        if state.kept:
            shown = ", ".join(state.kept[:5]) + (", ..." if len(state.kept) > 5 else "")
            cmd.warn(f"--overwrite kept {len(state.kept)} file(s) no run wrote: {shown}")
        never_ran = _capture(cmd, loaded, state, opts)
        _fold_never_ran(cmd, loaded, selector, state, never_ran)
        if (note := _overlay_note(state.sink.counts, opts)) is not None:
            cmd.warn(note)
        assert cmd.found is not None
        return _write(cmd, opened, state, cmd.found.skipped, opts)


def _open_model(
    cmd: Command, inputs: Sequence[Path | str] | Path | str, opts: RunOptions
) -> Loaded:
    """The model loaded and checked, its inputs found as its family takes them, and the
    options only its family takes applied to it."""

    assert cmd.found is not None  # open_command walked the inputs
    opened = cmd.load(
        opts.load, shows="The grids show", check=lambda m: _check_classifier(m, opts, cmd)
    )
    loaded = opened.model
    cmd.found = inputs_for(loaded, input_paths(inputs), cmd.found)
    _family_options(loaded, opts)
    if opts.report:
        warm_up()  # the report's templates, compiled while the images run
    return opened


def _capture(cmd: Command, loaded: LoadedModel, state: Plan, opts: RunOptions) -> set[str]:
    """Every image still to draw through the model, on the run's engine; the selected
    modules that never ran."""
    try:
        reused = (r for r in state.results if r.status == "reused")
        start_progress(cmd.notify, len(state.results), reused, unit=loaded.family.inputs.units)
        if opts.execution.engine == "ray":
            if opts.draw.pca:
                raise UsageError("--view pca runs on the local engine; leave out --engine ray")
            return stats_on_ray(cmd.model, state.names, state.todo, state.sink, opts)
        return capture_and_render(cmd.model, loaded, state, opts, cmd.notify, cmd.warn)
    except BaseException:
        state.sink.abort()
        raise


def _fold_never_ran(
    cmd: Command, loaded: LoadedModel, selector: str, state: Plan, never_ran: set[str]
) -> None:
    """What the selector swept in but the forward never called: one warning, and left out."""

    refs = layer_refs(loaded.module)
    state.names, idle = fold_never_ran(refs, selector, state.names, never_ran)
    for message in idle:
        cmd.warn(message)


def _family_options(loaded: LoadedModel, opts: RunOptions) -> None:
    """The options only some families take (a clip's length, a flow model's iterations, a
    detector's threshold), each applied to a model of a family that takes it and refused for
    another's, as the families' rows say."""
    inputs = loaded.family.inputs
    if opts.execution.engine == "ray" and not inputs.images:
        raise UsageError(
            f"--engine ray runs image models; {loaded.name} takes {inputs.noun}: leave it out"
        )
    taken = run_family(loaded.family).options
    for row in RUN_FAMILIES:
        for option in row.options:
            value = getattr(opts, option.name)
            if value is None:
                continue
            if option in taken:
                option.apply(loaded, value)
            elif option.refusal is not None and value != option.default:
                raise UsageError(option.refusal.format(model=loaded.name))


def _check_classifier(loaded: LoadedModel, opts: RunOptions, cmd: Command) -> None:
    """A family without gradients, or a backbone without a classifier: no gradients to take,
    no predictions to record."""
    family = loaded.family
    own_cam = run_family(family).own_cam
    if own_cam and opts.gradients.cam_method != DEFAULT_CAM:
        raise UsageError(
            f"--cam-method {opts.gradients.cam_method} does not apply to {loaded.name}: its "
            "--cam draws maps of its own (EigenCAM and one detection's Grad-CAM); leave "
            "--cam-method out"
        )
    if own_cam and opts.gradients.cam and not opts.gradients.grads:
        return  # maps of the family's own (a detector's EigenCAM, one detection's Grad-CAM)
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
    dictionary = cmd.dictionary(path, loaded)
    layer = dictionary.config.get("layer") or {}
    if layer.get("module") not in names:
        raise UsageError(
            f"--sae {path} was trained on {layer.get('key')}, which --layers does not select; "
            f"add it (--layers {layer.get('module')})"
        )
    return {str(layer.get("key")): dictionary}


def _dictionary(path: Path | None, features: dict[str, Any] | None) -> dict[str, Any] | None:
    """``--sae`` as the manifest names it: the file, the layer drawn as its features, their
    number and k, and the model it was trained on."""
    if path is None or not features:
        return None
    (key, dictionary), *_ = features.items()
    return {
        "file": str(path),
        "layer": key,
        "features": dictionary.features,
        "k": dictionary.k,
        "trained_on": dictionary.config.get("model"),
    }


def _select(cmd: Command, loaded: LoadedModel, opts: RunOptions) -> tuple[str, list[str]]:
    """The selector (the architecture's default when none was given) and the modules it names."""
    default = None
    if opts.layers is None and opts.sae is not None:  # the dictionary's own layer
        default = str((load_dictionary(opts.sae).config.get("layer") or {}).get("module"))
    if opts.layers is None and opts.capture == "attn":  # from the attention modules
        default = attention_selector(loaded.module)
    return cmd.select(loaded, opts.layers, default=default)


def _overlay_note(counts: RunCounts, opts: RunOptions) -> str | None:
    """Which layers got no overlay, when ``overlay_channel`` asked for a channel they do not
    have: some of them, whose grids were drawn without one, or every layer drawn (where the
    check before the run could not trace the model, see
    :func:`actviz.run.plan._check_overlay_channel`)."""
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
        related = related_reports(out_dir)
        shown = report_images(sink, plan.results, stats_doc, folders=opts.draw.grids)
        pages = build_report(record, stats_doc, shown, out_dir_name=out_dir.name, related=related)
        for rel, data in pages:  # made and written one at a time
            output.write_bytes(out_dir / rel, data)
    return result
