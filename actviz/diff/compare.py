"""``actviz diff``: two models (or two images) compared layer by layer, as named steps.

check -> load -> select -> stream (both models hooked on the same layers, one forward of each
per batch, running sums only) -> pictures -> write (``diff.json``, the chart, the page).
Nothing is kept across batches but the sums of :class:`~actviz.diff.metrics.LayerComparison`
and the per-layer scales of the pictures.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.diff.metrics import LayerComparison, cosine_similarity, hold_back, relative_l2
from actviz.diff.options import DiffOptions
from actviz.diff.pictures import PictureScale
from actviz.diff.result import (
    CKA_ESTIMATOR,
    CKA_UNDEFINED,
    DiffPicture,
    DiffResult,
    LayerDiff,
    ModelSide,
    diff_record,
    first_divergent,
)
from actviz.errors import ActvizError, ImageLoadError, OutputError, UsageError
from actviz.results import ImageResult, Reporter, SilentReporter

if TYPE_CHECKING:
    import torch

    from actviz.hooks import Capture
    from actviz.models import LoadedModel

__all__ = ["diff"]

#: The files a diff writes at the top of its output folder.
DIFF_FILES = ("diff.json", "similarity.png", "diff.html")


def diff(
    model: str,
    inputs: Sequence[Path | str],
    options: DiffOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> DiffResult:
    """Compare two models over the same images, or two images through one model, layer by
    layer: linear CKA, cosine similarity and relative L2 per layer, the first divergent layer,
    difference pictures, ``diff.json``, a similarity chart and ``diff.html``.

    Args:
        model: Model A: a torchvision name, or ``package.module:factory`` /
            ``path/to/file.py:factory`` (runs that code).
        inputs: Image files and/or folders. Without ``against``/``against_model``: exactly
            two image files, compared through ``model``.
        options: The diff's options (:class:`~actviz.diff.options.DiffOptions`).
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, any option by its flat name (``against``,
            ``against_model``, ``weights``, ``layers``, ``out``, ``threshold``, ...).

    Returns:
        What was compared and written.

    Raises:
        ActvizError: For every expected failure; :class:`~actviz.errors.UsageError` (exit 2)
            for a diff that cannot be set up as asked.
        TypeError: For an unknown keyword, or keywords given together with ``options``.
    """
    from actviz import images as image_io
    from actviz import output

    if options is not None and keywords:
        raise TypeError("pass either options or keywords, not both")
    opts = options or DiffOptions.from_keywords(**keywords)
    started = time.perf_counter()
    notify = reporter or SilentReporter()
    paths = [Path(p) for p in inputs]
    _check_inputs(paths, opts)
    found = image_io.discover(paths)
    if not opts.compares_models and len(found.images) != 2:
        raise UsageError(f"{paths[0]} and {paths[1]} are the same file; give two images")
    out = opts.out
    created = not out.exists()
    _prepare(out, opts.execution.overwrite)
    with output.removed_if_empty(out, created):
        warnings: list[str] = []
        loaded_a = _load(model, opts.load.weights, opts, notify, warnings)
        loaded_b = (
            _load(opts.against_model or model, opts.weights_b, opts, notify, warnings)
            if opts.compares_models
            else loaded_a
        )
        if loaded_b is not loaded_a and loaded_b.preprocess != loaded_a.preprocess:
            warnings.append(
                f"{loaded_b.name} is fed with {loaded_a.name}'s preprocessing "
                f"({loaded_a.preprocess.crop_size[0]} x {loaded_a.preprocess.crop_size[1]}), "
                "not its own"
            )
            notify.warn(warnings[-1])
        selector, names = _select(model, loaded_a, loaded_b, opts)
        results = [
            ImageResult(path=item.path, out_dir=folder)
            for item, folder in zip(
                found.images, output.image_dirs([i.rel for i in found.images]), strict=True
            )
        ]
        state = _Stream(opts=opts, a=loaded_a, b=loaded_b, names=names, results=results)
        notify.start(len(results))
        _stream(state, notify)
        for name in sorted(state.never_ran):
            warnings.append(f"layer {name} was selected but never ran in the forward pass")
            notify.warn(warnings[-1])
        if not opts.compares_models and state.failed:
            bad = state.failed[0]
            raise ImageLoadError(str(bad.path), bad.error or "unreadable")
        return _write(state, selector, found.skipped, warnings, started)


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


def _prepare(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty folder unless ``overwrite``; then remove what an earlier diff wrote
    there (the files its ``diff.json`` names), and nothing else."""
    from actviz import output

    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputError(
            f"{out} is not empty; add --overwrite to replace an earlier diff there, "
            "or choose another --out",
            usage=True,
        )
    output.prepare_out_dir(out, overwrite=True)
    record = out / "diff.json"
    if not overwrite or not record.is_file():
        return
    with contextlib.suppress(OSError, ValueError):
        earlier = json.loads(record.read_text(encoding="utf-8"))
        files = [p.get("file") for p in earlier.get("pictures", []) if isinstance(p, dict)]
        root = out.resolve()
        for rel in [*files, *DIFF_FILES]:
            if not isinstance(rel, str):
                continue
            target = (out / rel).resolve()
            if root in target.parents and target.is_file():  # never outside the folder
                target.unlink()
                folder = target.parent
                while folder != root and not any(folder.iterdir()):
                    folder.rmdir()
                    folder = folder.parent


def _load(
    model: str, weights: str, opts: DiffOptions, notify: Reporter, warnings: list[str]
) -> LoadedModel:
    """Build one model exactly as ``run`` does (checkpoints safe unless trusted; random
    weights from the same seed), warning loudly about weights that are random by accident."""
    from actviz.models import load_model

    load = opts.load
    loaded = load_model(
        model,
        weights=weights,
        device=load.device,
        trust_checkpoint=load.trust_checkpoint,
        input_size=load.input_size,
        in_chans=load.in_chans,
    )
    if loaded.weights.random and loaded.weights.spec.lower() != "none":
        why = loaded.weights.reason or "no pretrained weights"
        warnings.append(
            f"RANDOM WEIGHTS for {model}: {why}; pass --weights none (or --against-weights "
            "none) to say that is what you want"
        )
        notify.warn(warnings[-1])
    if opts.execution.channels_last:
        import torch

        loaded.module.to(memory_format=torch.channels_last)
    return loaded


def _select(model: str, a: LoadedModel, b: LoadedModel, opts: DiffOptions) -> tuple[str, list[str]]:
    """The selector and A's layers it names; B must have the same names."""
    from actviz.hooks import layer_refs
    from actviz.layouts import default_selector
    from actviz.selectors import select_layers

    selector = opts.layers if opts.layers is not None else default_selector(a.module)
    names = select_layers(layer_refs(a.module), selector, model=model)
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


@dataclass
class _Stream:
    """What streaming the images accumulates."""

    opts: DiffOptions
    a: LoadedModel
    b: LoadedModel
    names: list[str]
    results: list[ImageResult]
    order: list[str] = field(default_factory=list)
    info: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...] | None]] = field(
        default_factory=dict
    )
    comparisons: dict[str, LayerComparison] = field(default_factory=dict)
    scales: dict[str, PictureScale] = field(default_factory=dict)
    pictures: list[DiffPicture] = field(default_factory=list)
    pictured: list[int] = field(default_factory=list)
    never_ran: set[str] = field(default_factory=set)
    failed: list[ImageResult] = field(default_factory=list)
    contexts_a: dict[str, Any] = field(default_factory=dict)
    contexts_b: dict[str, Any] = field(default_factory=dict)

    @property
    def two_images(self) -> bool:
        return not self.opts.compares_models


@dataclass
class _Batch:
    """One batch as pairs: per capture key, A's rows and B's rows (the same images)."""

    rows: list[int]  # index into the results of each row (for two images: the first image)
    pairs: list[tuple[Capture, torch.Tensor, torch.Tensor | None]]
    remaining: int  # images still to come after this batch


def _stream(state: _Stream, notify: Reporter) -> None:
    """Every image through both models, the running sums updated per batch; pictures of the
    first images drawn as soon as their scale is known (or in a second pass over just them)."""
    from actviz.layouts import layer_contexts

    state.contexts_a = layer_contexts(state.a.module, state.a.input_size)
    state.contexts_b = (
        state.contexts_a
        if state.b is state.a
        else layer_contexts(state.b.module, state.b.input_size)
    )
    paths = [r.path for r in state.results]
    want = 1 if state.two_images else min(state.opts.images, len(paths))
    want = want if state.opts.images > 0 else 0
    drawn = False
    for batch in _batches(state, paths, notify):
        for cap, tensor_a, tensor_b in batch.pairs:
            _measure(state, cap, tensor_a, tensor_b, batch.remaining)
        new = list(range(min(max(0, want - len(state.pictured)), len(batch.rows))))
        for i in new:
            state.pictured.append(batch.rows[i])
            for cap, tensor_a, tensor_b in batch.pairs:
                _scale(state, cap, tensor_a, tensor_b, i)
        if want and len(new) == want:
            # Every pictured image is in this batch: draw now, nothing to keep.
            _draw(state, batch, new)
            drawn = True
    if want and not drawn and state.pictured:
        # The pictured images spanned several batches: their scales are known now, so run
        # just them through again and draw (a second pass over a few images, not a buffer).
        everything = state.results
        state.results = [everything[i] for i in state.pictured]
        try:
            for batch in _batches(state, [r.path for r in state.results], None):
                _draw(state, batch, list(range(len(batch.rows))))
        finally:
            state.results = everything


def _batches(state: _Stream, paths: list[Path], notify: Reporter | None) -> Iterator[_Batch]:
    """Decode, batch, run A (and B on the same input); yield each batch's pairs."""
    import torch

    from actviz.forward import BatchForward, model_failure
    from actviz.hooks import ActivationRecorder, eval_mode

    opts, a, b = state.opts, state.a, state.b
    ex = opts.execution
    batch_size = max(2, ex.batch_size) if state.two_images else ex.batch_size
    forward = BatchForward(a, a.module, batch_size, ex.workers, ex.amp, ex.channels_last)
    autocast_dtype = torch.float16 if a.device.type == "cuda" else torch.bfloat16

    def failed(index: int, error: str | None) -> None:
        result = state.results[index]
        result.status, result.error = "failed", error
        state.failed.append(result)
        if notify is not None:
            notify.advance(result)

    with contextlib.ExitStack() as stack:
        rec_a = stack.enter_context(ActivationRecorder(a.module, state.names))
        stack.enter_context(eval_mode(a.module))
        rec_b = None
        if b is not a:
            rec_b = stack.enter_context(ActivationRecorder(b.module, state.names))
            stack.enter_context(eval_mode(b.module))
        for good, _logits, x in forward.batches(paths, stack, failed):
            state.never_ran.update(rec_a.never_called())
            caps_b: dict[str, torch.Tensor] = {}
            if rec_b is not None:
                with (
                    torch.inference_mode(),
                    torch.autocast(a.device.type, dtype=autocast_dtype, enabled=ex.amp),
                ):
                    try:
                        b.module(x)
                    except ActvizError:
                        raise
                    except Exception as exc:  # the model's own code: any type, one line
                        raise model_failure(b.name, paths[good[0][0]], exc, x) from exc
                state.never_ran.update(rec_b.never_called())
                caps_b = {key: rec_b[key] for key in rec_b}
            rows = [index for index, _, _ in good]
            for index, size, _x in good:
                state.results[index].size = size
            remaining = len(paths) - rows[-1] - 1
            pairs: list[tuple[Capture, torch.Tensor, torch.Tensor | None]] = []
            for cap in rec_a.captures:
                tensor = rec_a[cap.key]
                if rec_b is not None:
                    pairs.append((cap, tensor, caps_b.get(cap.key)))
                elif tensor.shape[0] == 2:  # two images: A is the first row, B the second
                    pairs.append((cap, tensor[0:1], tensor[1:2]))
            if rec_b is None:
                rows = rows[:1] if len(rows) == 2 else []
            if rows:
                yield _Batch(rows, pairs, remaining)
            if notify is not None:
                for index in [index for index, _, _ in good]:
                    notify.advance(state.results[index])


def _measure(
    state: _Stream,
    cap: Capture,
    tensor_a: torch.Tensor,
    tensor_b: torch.Tensor | None,
    remaining: int,
) -> None:
    """Add one batch of one layer to its running sums."""
    key = cap.key
    if key not in state.comparisons:
        state.order.append(key)
        state.comparisons[key] = LayerComparison(cka=not state.two_images)
        shape_b = tuple(tensor_b.shape[1:]) if tensor_b is not None else None
        state.info[key] = (cap.module, cap.module_type, tuple(tensor_a.shape[1:]), shape_b)
    if tensor_b is None:
        return
    state.comparisons[key].add(tensor_a.numpy(), tensor_b.numpy(), hold=hold_back(remaining))


def _drawables(
    state: _Stream, cap: Capture, tensor_a: torch.Tensor, tensor_b: torch.Tensor | None, row: int
) -> tuple[Any, Any] | None:
    """A's and B's drawable arrays of one row, or None when they cannot be drawn side by side."""
    from actviz.layouts import to_drawable

    if tensor_b is None or tensor_a.shape != tensor_b.shape:
        return None
    da = to_drawable(tensor_a[row].numpy(), state.contexts_a.get(cap.module))
    db = to_drawable(tensor_b[row].numpy(), state.contexts_b.get(cap.module))
    if da.array is None or db.array is None or da.kind != db.kind or da.layout != db.layout:
        return None
    if da.array.shape != db.array.shape:
        return None
    return da, db


def _scale(
    state: _Stream, cap: Capture, tensor_a: torch.Tensor, tensor_b: torch.Tensor | None, row: int
) -> None:
    """Measure one pictured image of one layer for the layer's shared scale."""
    pair = _drawables(state, cap, tensor_a, tensor_b, row)
    if pair is not None:
        state.scales.setdefault(cap.key, PictureScale()).update(pair[0].array, pair[1].array)


def _draw(state: _Stream, batch: _Batch, rows: list[int]) -> None:
    """Write the difference pictures of the given rows of a batch."""
    from actviz import output
    from actviz.diff.pictures import caption_lines, compose, render_diff

    opts = state.opts
    width = max(2, len(str(len(state.order) - 1)))
    position = {key: i for i, key in enumerate(state.order)}
    for i in rows:
        result = state.results[batch.rows[i]]
        if state.two_images:
            first, second = state.results[0], state.results[1]
            image = f"{first.path.name} vs {second.path.name}"
            folder = output.safe_name(f"{first.out_dir.name}_vs_{second.out_dir.name}")
            titles = (f"A  {first.path.name}", f"B  {second.path.name}")
        else:
            image, folder = str(result.path), result.out_dir.as_posix()
            titles = (f"A  {_side(state.a).label}", f"B  {_side(state.b).label}")
        for cap, tensor_a, tensor_b in batch.pairs:
            scale = state.scales.get(cap.key)
            pair = _drawables(state, cap, tensor_a, tensor_b, i)
            if scale is None or pair is None or cap.key not in position:
                continue
            da, db = pair
            shape = tuple(tensor_a.shape[1:])
            what = f"{cap.key}   {cap.module_type}   {shape}"
            note = f"   ({da.note})" if da.note else ""
            panels = render_diff(
                da.array,
                db.array,
                titles=(f"{titles[0]}   {what}{note}", f"{titles[1]}   {what}", f"B - A   {what}"),
                scale=scale,
                max_channels=opts.max_channels,
            )
            assert tensor_b is not None  # _drawables checked
            row_a = tensor_a[i : i + 1].reshape(1, -1).double().numpy()
            row_b = tensor_b[i : i + 1].reshape(1, -1).double().numpy()
            caption = caption_lines(
                cap.key,
                image,
                panels,
                cosine=float(cosine_similarity(row_a, row_b)[0]),
                rel_l2=float(relative_l2(row_a, row_b)[0]),
                scope=(
                    "for this pair"
                    if state.two_images
                    else f"over the {scale.images} pictured image{'s' if scale.images != 1 else ''}"
                ),
            )
            picture, boxes = compose(panels, caption)
            rel = f"{folder}/{output.layer_filename(position[cap.key], cap.key, width=width)}"
            output.write_png(opts.out / rel, picture, compress_level=opts.png_compression)
            state.pictures.append(
                DiffPicture(
                    image=image,
                    layer=cap.key,
                    file=rel,
                    channels=panels.channels,
                    channels_total=panels.channels_total,
                    panels={"a": boxes[0], "b": boxes[1], "diff": boxes[2]},
                    diff_range=scale.diff_range[1],
                    size=picture.size,
                )
            )


def _side(loaded: LoadedModel) -> ModelSide:
    return ModelSide(loaded.name, loaded.weights)


def _layers(state: _Stream) -> list[LayerDiff]:
    """Each compared layer's figures, in depth order."""
    layers = []
    for key in state.order:
        module, module_type, shape_a, shape_b = state.info[key]
        comparison = state.comparisons[key]
        notes = []
        cka_value: float | None = None
        defined = True
        if shape_b is None:
            notes.append("model B produced no such output")
        elif shape_a != shape_b:
            notes.append(f"shapes differ: A {shape_a}, B {shape_b}; CKA only")
        if not state.two_images and shape_b is not None:
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
    state: _Stream,
    selector: str,
    skipped: list[tuple[Path, str]],
    warnings: list[str],
    started: float,
) -> DiffResult:
    """``diff.json``, the similarity chart and the page."""
    from actviz import output
    from actviz.diff.chart import similarity_png

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
        }
    result = DiffResult(
        mode="images" if state.two_images else "models",
        a=_side(state.a),
        b=_side(state.b),
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
        warnings=warnings,
        cka=cka,
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
            title=f"{what}: similarity by layer ({ok} image{'s' if ok != 1 else ''})",
        )
        result.chart = out / "similarity.png"
        output.write_bytes(result.chart, png)
    if opts.report:
        result.report = out / "diff.html"
    result.seconds = time.perf_counter() - started
    record = diff_record(result)
    if opts.report:
        from actviz.report import diff_page

        output.write_bytes(out / "diff.html", diff_page(record))
    output.write_json(result.record, record)
    return result
