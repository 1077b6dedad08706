"""``actviz diff``: two models (or two images) compared layer by layer, as named steps.

check -> load -> select -> stream (both models hooked on the same layers, one forward of each
per batch, running sums only) -> pictures -> write (``diff.json``, the chart, the page).
Nothing is kept across batches but the sums of :class:`~actviz.diff.metrics.LayerComparison`
and the per-layer scales of the pictures.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command import open_command
from actviz.command.opening import CommandSpec, input_paths
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.diff.chart import similarity_png
from actviz.diff.options import ALIASES, DiffOptions
from actviz.diff.result import (
    CKA_BATCHES,
    CKA_ESTIMATOR,
    CKA_UNDEFINED,
    DiffResult,
    LayerDiff,
    ModelSide,
    diff_record,
    first_changed,
    first_divergent,
)
from actviz.diff.stream import PICTURES_DIR, Stream, stream
from actviz.errors import ImageLoadError, OutputError, UsageError
from actviz.hooks import layer_refs
from actviz.report import diff_page, rebuild_run_report
from actviz.results import ImageResult
from actviz.selectors import select_layers

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.io.images import Discovery
    from actviz.models import LoadedModel

__all__ = ["diff"]

#: The files a diff writes at the top of its output folder.
DIFF_FILES = ("diff.json", "similarity.png", "diff.html")


def diff(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: DiffOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> DiffResult:
    """Compare two models over the same images, or two images through one model, layer by
    layer: linear CKA, cosine similarity and relative L2 per layer, the first divergent layer,
    difference pictures, ``diff.json``, a similarity chart and ``diff.html``.

    Args:
        model: Model A, as :func:`actviz.run` takes it; ``against`` loads a checkpoint into
            a copy of a module object.
        inputs: Image files and/or folders. Without ``against``/``against_model``: exactly
            two image files, compared through ``model``.
        options, reporter, **keywords: As :func:`actviz.run` takes them, for
            :class:`~actviz.diff.options.DiffOptions`.

    Raises:
        ActvizError: For every expected failure (exit 2 for a diff that cannot be set up as
            asked); TypeError for an unknown keyword, or keywords with ``options``.
    """

    opts = from_flat(
        DiffOptions, COMMON_GROUPS, keywords, caller="diff", given=options, aliases=ALIASES
    )
    given_b = opts.against_model if opts.against_model is not None else model
    paths = input_paths(inputs)
    _check_inputs(paths, opts)

    def two_images(found: Discovery) -> None:
        if not opts.compares_models and len(found.images) != 2:
            raise UsageError(f"{paths[0]} and {paths[1]} are the same file; give two images")

    out = opts.out
    with open_command(
        model,
        out,
        SPEC,
        opts.execution,
        reporter=reporter,
        inputs=paths,
        check_inputs=two_images,
        restore=[given_b],
    ) as cmd:
        assert cmd.found is not None  # open_command walked the inputs
        found, notify = cmd.found, cmd.notify
        if opts.execution.overwrite:
            _remove_earlier(out)
        # Both built exactly as ``run`` builds them (checkpoints safe unless trusted; random
        # weights from the same seed).
        opened_a = cmd.load(opts.load, shows=_SHOWS)
        opened_b = (
            cmd.load(
                opts.load,
                shows=_SHOWS,
                given=given_b,
                weights=opts.weights_b,
                flag="--against-weights",
            )
            if opts.compares_models
            else opened_a
        )
        loaded_a, loaded_b = opened_a.model, opened_b.model
        if loaded_b is not loaded_a and loaded_b.preprocess != loaded_a.preprocess:
            cmd.warn(
                f"{loaded_b.name} is fed with {loaded_a.name}'s preprocessing "
                f"({loaded_a.preprocess.crop_size[0]} x {loaded_a.preprocess.crop_size[1]}), "
                "not its own"
            )
        selector, names = _select(cmd, loaded_a, loaded_b, opts)
        results = [
            ImageResult(path=item.path, out_dir=folder)
            for item, folder in zip(
                found.images, output.image_dirs([i.rel for i in found.images]), strict=True
            )
        ]
        state = Stream(opts=opts, a=loaded_a, b=loaded_b, names=names, results=results)
        start_progress(notify, len(results))
        with _nothing_half_done(state):
            stream(state, notify)
        for name in sorted(state.never_ran):
            cmd.warn(f"layer {name} was selected but never ran in the forward pass")
        if not opts.compares_models and state.failed:
            bad = state.failed[0]
            raise ImageLoadError(str(bad.path), bad.error or "unreadable")
        if state.resized:
            cmd.warn(_resized_warning(state))
        _check_compared(state, names)
        sides = (
            ModelSide(loaded_a.name, loaded_a.weights, opened_a.warning, loaded_a.record()),
            ModelSide(loaded_b.name, loaded_b.weights, opened_b.warning, loaded_b.record()),
        )
        return _write(state, sides, selector, found.skipped, cmd)


@contextlib.contextmanager
def _nothing_half_done(state: Stream) -> Iterator[None]:
    """A diff writes its summary at the end: when the stream stops early (Ctrl-C, SIGTERM,
    an error), the pictures drawn so far are removed rather than left without a
    ``diff.json`` that names them."""
    try:
        yield
    except BaseException:
        # The first error is the one to report; a failed clean-up must not replace it.
        with contextlib.suppress(OutputError):
            output.remove_written(
                state.opts.out, [p.file for p in state.pictures], prune=[PICTURES_DIR]
            )
        raise


def _resized_warning(state: Stream) -> str:
    """What was compared at a common map size, and how to avoid it."""
    keys = [key for key in state.order if key in state.resized]
    shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return (
        f"the maps of {shown} differ in size from image to image ({state.a.name}'s "
        "preprocessing keeps each image's aspect ratio): each layer was compared at its size "
        "for the first image, the other maps resized to it by adaptive average pooling; pass "
        "--input-size H,W to crop every image to one size"
    )


def _check_compared(state: Stream, names: list[str]) -> None:
    """An error, never an empty comparison, when images were read but no layer could be
    paired (every image failing is reported by the caller as such)."""
    if state.order or len(state.failed) == len(state.results):
        return
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    raise UsageError(
        f"no layer could be compared: {shown} gave no output both sides could pair; "
        "choose other layers with --layers (actviz list-layers MODEL shows them)"
    )


def _check_inputs(paths: list[Path], opts: DiffOptions) -> None:
    """Usage errors before anything is loaded or written."""
    if not paths:
        raise UsageError("diff needs images: give image files or folders")
    if opts.against is not None and not opts.against.is_file():
        what = "is a folder" if opts.against.is_dir() else "does not exist"
        raise UsageError(f"--against {opts.against} {what}; give model B's checkpoint file")
    if opts.compares_models:
        return
    if len(paths) != 2 or any(p.is_dir() for p in paths):
        given = ", ".join(str(p) for p in paths[:4]) + (", ..." if len(paths) > 4 else "")
        raise UsageError(
            "diff compares two models (--against CHECKPOINT or --against-model NAME) over "
            f"images, or exactly two image files through one model; got {given}"
        )


#: What the pictures of a model with random weights show, in the loud warning.
_SHOWS = "The pictures show"
_NOT_EMPTY = "add --overwrite to replace an earlier diff there, or choose another --out"
SPEC = CommandSpec("diff", hint=_NOT_EMPTY)


def _remove_earlier(out: Path) -> None:
    """``--overwrite``: remove what an earlier diff wrote there (the files its ``diff.json``
    names), and nothing else."""

    record = out / "diff.json"
    if not record.is_file():
        return
    with contextlib.suppress(OSError, ValueError):
        earlier = json.loads(record.read_text(encoding="utf-8"))
        files = [p.get("file") for p in earlier.get("pictures", []) if isinstance(p, dict)]
        output.remove_written(out, [f for f in [*files, *DIFF_FILES] if isinstance(f, str)])


def _select(
    cmd: Command, a: LoadedModel, b: LoadedModel, opts: DiffOptions
) -> tuple[str, list[str]]:
    """The selector and A's layers it names; B must have the same names."""

    model = cmd.model
    selector, names = cmd.select(a, opts.layers)
    if b is a:
        return selector, names
    names_b = select_layers(layer_refs(b.module), selector, model=b.name)
    modules_b = dict(b.module.named_modules())
    missing_b = [n for n in names if n not in modules_b]
    missing_a = [n for n in names_b if n not in set(names)]
    if missing_b or missing_a:
        side, missing = ("B", missing_b) if missing_b else ("A", missing_a)
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise UsageError(
            f"the two models' layers differ: model {side} ({b.name if side == 'B' else model}) "
            f"has no {', '.join(missing[:5])}{more}; choose layers both have with --layers "
            "(actviz list-layers MODEL shows them)"
        )
    return selector, names


def _layers(state: Stream) -> list[LayerDiff]:
    """Each compared layer's figures, in depth order."""
    layers = []
    for key in state.order:
        module, module_type, shape_a, shape_b = state.info[key]
        comparison = state.comparisons[key]
        notes = []
        cka_value: float | None = None
        defined = True
        if key in state.refused:
            notes.append(f"not compared: {state.refused[key]}")
        elif shape_b is None:
            notes.append("model B produced no such output")
        elif shape_a != shape_b:
            notes.append(f"shapes differ: A {shape_a}, B {shape_b}; CKA only")
        if key in state.resized:
            others = ", ".join(str(s) for s in sorted(state.resized[key])[:3])
            notes.append(
                f"compared at {shape_a} per image; maps of other sizes ({others}) resized to "
                "it by adaptive average pooling"
            )
        if not state.two_images and shape_b is not None and key not in state.refused:
            cka = comparison.cka()
            cka_value, defined = cka.value, cka.defined
            if cka.note:
                notes.append(cka.note)
        layers.append(
            LayerDiff(
                name=key,
                module=module,
                module_type=module_type,
                cka=cka_value,
                cka_defined=defined,
                cosine=comparison.cosine,
                rel_l2=comparison.rel_l2,
                shape_a=shape_a,
                shape_b=shape_b,
                note="; ".join(notes) or None,
            )
        )
    return layers


def _write(
    state: Stream,
    sides: tuple[ModelSide, ModelSide],
    selector: str,
    skipped: list[tuple[Path, str]],
    cmd: Command,
) -> DiffResult:
    """``diff.json``, the similarity chart and the page."""

    opts, out = state.opts, state.opts.out
    layers = _layers(state)
    first = first_divergent(layers, opts.metric, opts.threshold)
    ok = len(state.results) - len(state.failed)
    cka: dict[str, Any]
    if state.two_images:
        cka = {
            "estimator": None,
            "note": "not computed: CKA compares representations across many images, and two "
            "images make one pair",
        }
    else:
        counts = [state.comparisons[k].cka() for k in state.order]
        cka = {
            "estimator": CKA_ESTIMATOR,
            "undefined": CKA_UNDEFINED,
            "images": max((c.images for c in counts), default=0),
            "groups": max((c.groups for c in counts), default=0),
            "biased": any(c.estimator == "biased" for c in counts),
            "batch_size": opts.execution.batch_size,
            "batches": CKA_BATCHES,
        }
    result = DiffResult(
        mode="images" if state.two_images else "models",
        a=sides[0],
        b=sides[1],
        selector=selector,
        metric=opts.metric,
        threshold=opts.threshold,
        layers=layers,
        first_divergent=first,
        images=state.results,
        out=out,
        record=out / "diff.json",
        device=str(state.a.device),
        seconds=0.0,
        skipped=skipped,
        pictures=state.pictures,
        pictured=len(state.pictured) if ok else 0,
        warnings=cmd.warnings,
        cka=cka,
        first_changed=first_changed(layers),
    )
    if layers:
        series: dict[str, Sequence[float | None]] = {"cosine": [layer.cosine for layer in layers]}
        if not state.two_images:
            series = {"cka": [layer.cka for layer in layers], **series}
        what = (
            f"{result.a.label}  vs  {result.b.label}"
            if not state.two_images
            else f"{state.results[0].path.name} vs {state.results[1].path.name} "
            f"through {result.a.label}"
        )
        png = similarity_png(
            [layer.name for layer in layers],
            series,
            threshold=opts.threshold,
            metric=opts.metric,
            first_divergent=first,
            title=f"{what}: similarity by layer ("
            + ("one pair)" if state.two_images else f"{ok} image{'s' if ok != 1 else ''})"),
        )
        result.chart = out / "similarity.png"
        output.write_bytes(result.chart, png)
    if opts.report:
        result.report = out / "diff.html"
    result.seconds = cmd.seconds()
    record = diff_record(result)
    if opts.report:
        output.write_bytes(out / "diff.html", diff_page(record))
        # A run's report in the same folder now links this page.
        for rel, data in rebuild_run_report(out).items():
            output.write_bytes(out / rel, data)
    output.write_json(result.record, record)
    return result
