"""The pipeline in one readable place: load -> select -> capture -> render -> write.

The CLI is a thin layer over these functions; they return small dataclasses, report progress
through an optional :class:`Reporter`, and raise :class:`~actviz.errors.ActvizError` subclasses.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.draw import (
    DrawOptions,
    ImageJob,
    Norm,
    TensorFormat,
    draw_image,
    render_activation,
    summaries,
)
from actviz.errors import ModelError, UsageError
from actviz.listing import LayerInfo, LayerListing, list_layers
from actviz.results import (
    ImageResult,
    LayerResult,
    Prediction,
    Reporter,
    RunResult,
    SilentReporter,
    image_record,
    manifest,
)

if TYPE_CHECKING:
    from actviz.hooks import CaptureMode
    from actviz.layouts import Layout
    from actviz.models import LoadedModel
    from actviz.render import Order

__all__ = [
    "ImageResult",
    "LayerInfo",
    "LayerListing",
    "LayerResult",
    "Prediction",
    "Reporter",
    "RunResult",
    "list_layers",
    "render_activation",
    "run",
]


def run(
    model: str,
    inputs: Sequence[Path | str],
    *,
    layers: str | Sequence[str] | None = None,
    out: Path | str = "actviz-out",
    weights: str = "auto",
    device: str = "auto",
    capture: CaptureMode = "output",
    max_channels: int = 64,
    order: Order = "index",
    norm: Norm = "channel",
    clip: tuple[float, float] | None = None,
    cmap: str | None = None,
    layout: Layout = "auto",
    overlay: bool = False,
    overlay_channel: int | None = None,
    save_tensors: TensorFormat | None = None,
    png_compression: int = 1,
    batch_size: int = 8,
    workers: int = 0,
    resume: bool = False,
    overwrite: bool = False,
    amp: bool = False,
    channels_last: bool = False,
    trust_checkpoint: bool = False,
    input_size: tuple[int, int] | None = None,
    in_chans: int = 3,
    top_k: int = 5,
    reporter: Reporter | None = None,
) -> RunResult:
    """Run images through a model and write one feature-map grid PNG per selected layer.

    Args:
        model: A torchvision model name, or ``package.module:factory`` /
            ``path/to/file.py:factory`` for the user's own model (runs that code).
        inputs: Image files and/or folders (walked recursively).
        layers: Selector for the layers to draw (see ``actviz.selectors``); None picks a
            sensible default for the architecture (convolutions, ViT blocks, Swin stages).
        out: Output folder; gets ``<image>/<NN>_<layer>.png`` and ``manifest.json``.
        weights: ``auto``, ``default``, ``none``, an enum name, or a checkpoint path.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        capture: Draw each layer's ``output``, its ``input``, or ``both``.
        max_channels: Channels drawn per grid at most (0 = all).
        order: Which channels when capped: ``index``, or the top ones by ``mean``, ``max``
            or ``std``.
        norm: ``channel`` (each tile its own range), ``layer`` (one range per grid), or
            ``shared`` (one range per layer across every image: a second pass measures it).
        clip: Percentiles ``(lo, hi)`` to clip to before scaling, e.g. ``(1, 99)``.
        cmap: A matplotlib colormap; None picks viridis, or RdBu_r centred on 0 for signed
            activations.
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        overlay: Also write each layer's mean map blended over the model's input view.
        overlay_channel: Overlay this channel instead of the mean.
        save_tensors: Also save raw activations as ``npy`` or ``safetensors``.
        png_compression: zlib level 0-9 for the PNGs (1 is fast and nearly as small).
        batch_size: Images per forward pass.
        workers: DataLoader worker processes for decoding (0: one background thread).
        resume: Skip images whose outputs an earlier run with the same settings completed.
        overwrite: Replace an earlier run's outputs in ``out``.
        amp: Autocast the forward pass (bfloat16 on CPU, float16 on CUDA); the maps are
            drawn in float32.
        channels_last: Run the model in channels-last memory format.
        trust_checkpoint: Allow a checkpoint that needs full unpickling (runs its code).
        input_size: ``(height, width)`` of the model input, for models that do not take
            224 x 224.
        in_chans: 3 (RGB) or 1 (greyscale) input channels.
        top_k: How many predictions to record per image for classifiers.
        reporter: Receives warnings and progress.

    Returns:
        What was written, per image and layer.

    Raises:
        ActvizError: For every expected failure (unknown model, empty selection, ...).
    """
    import torch

    from actviz import images as image_io
    from actviz import output
    from actviz.hooks import ActivationRecorder, eval_mode, layer_refs
    from actviz.layouts import default_selector, layer_contexts
    from actviz.models import load_model
    from actviz.selectors import select_layers

    started = time.perf_counter()
    report = reporter or SilentReporter()
    out_dir = Path(out)
    if batch_size < 1 or workers < 0:
        raise UsageError("--batch-size must be at least 1 and --workers at least 0")
    draw = DrawOptions(
        max_channels=max_channels,
        order=order,
        norm=norm,
        clip=_checked_clip(clip),
        cmap=_checked_cmap(cmap),
        layout=layout,
        overlay=overlay,
        overlay_channel=overlay_channel,
        save_tensors=save_tensors,
        png_compression=png_compression,
    )

    found = image_io.discover([Path(p) for p in inputs])
    output.prepare_out_dir(out_dir, resume=resume, overwrite=overwrite)
    loaded = load_model(
        model,
        weights=weights,
        device=device,
        trust_checkpoint=trust_checkpoint,
        input_size=input_size,
        in_chans=in_chans,
    )
    warnings: list[str] = []
    if loaded.weights.random and loaded.weights.spec != "none":
        warnings.append(_random_weights_warning(loaded))
        report.warn(warnings[-1])

    module = loaded.module
    selector = (
        default_selector(module)
        if layers is None
        else (layers if isinstance(layers, str) else ",".join(layers))
    )
    names = select_layers(layer_refs(module), selector, model=model)
    contexts = layer_contexts(module, loaded.input_size)
    dirs = output.image_dirs([item.rel for item in found.images])
    results = [
        ImageResult(path=item.path, out_dir=folder)
        for item, folder in zip(found.images, dirs, strict=True)
    ]
    settings = {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "selector": selector,
        "capture": capture,
        "draw": {k: v for k, v in draw.describe().items() if k != "png_compression"},
        "input_size": list(loaded.input_size),
    }
    records = output.RunRecords(out_dir, settings)
    if resume:
        _reuse_earlier(records, results)
    elif overwrite:
        records.reset([r.out_dir for r in results])
    todo = [r for r in results if r.status != "reused"]

    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    forward = _Forward(loaded, module, batch_size, workers, amp, channels_last)

    ranges: dict[str, tuple[float, float]] = {}
    if draw.norm == "shared":
        # One scale per layer for the whole run needs every image's range before drawing.
        with ActivationRecorder(module, names, mode=capture) as recorder, eval_mode(module):
            ranges = _shared_ranges(forward, [r.path for r in results], recorder, draw.clip)

    report.start(len(results))
    for result in results:
        if result.status == "reused":
            report.advance(result)
    never_ran: set[str] = set()
    in_flight: deque[tuple[list[ImageResult], list[Future[list[LayerResult]]]]] = deque()

    def settle(batch: list[ImageResult], futures: list[Future[list[LayerResult]]]) -> None:
        for result, future in zip(batch, futures, strict=True):
            result.layers = future.result()
            records.add(image_record(result))
            report.advance(result)

    def failed(index: int, error: str | None) -> None:
        result = todo[index]
        result.status, result.error = "failed", error
        records.add(image_record(result))
        report.advance(result)

    with (
        ActivationRecorder(module, names, mode=capture) as recorder,
        eval_mode(module),
        ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
        contextlib.ExitStack() as stack,
    ):
        try:
            for good, logits in forward.batches([r.path for r in todo], stack, failed):
                never_ran.update(recorder.never_called())
                captures = recorder.captures
                layer_summaries = [summaries(recorder[cap.key]) for cap in captures]
                futures = []
                for i, (index, size, x_cpu) in enumerate(good):
                    result = todo[index]
                    result.size = size
                    result.predictions = _top_k(logits, i, loaded.categories, top_k)
                    job = ImageJob(
                        captures=captures,
                        summaries=layer_summaries,
                        index=i,
                        folder=result.out_dir,
                        out_dir=out_dir,
                        options=draw,
                        contexts=contexts,
                        ranges=ranges,
                        model_input=x_cpu if draw.overlay else None,
                        mean=loaded.preprocess.mean,
                        std=loaded.preprocess.std,
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
    for name in sorted(never_ran):
        warnings.append(f"layer {name} was selected but never ran in the forward pass")
        report.warn(warnings[-1])

    manifest_path = out_dir / "manifest.json"
    result_obj = RunResult(
        model=model,
        weights=loaded.weights,
        device=str(loaded.device),
        selector=selector,
        layers=names,
        out=out_dir,
        images=results,
        skipped=found.skipped,
        seconds=time.perf_counter() - started,
        manifest=manifest_path,
        warnings=warnings,
        options={
            "capture": capture,
            "input_size": list(loaded.input_size),
            "in_chans": in_chans,
            "batch_size": batch_size,
            "workers": workers,
            "amp": amp,
            "channels_last": channels_last,
            "png_compression": png_compression,
            "resume": resume,
            "overwrite": overwrite,
        },
        render=draw.describe(),
    )
    output.write_json(manifest_path, manifest(result_obj))
    return result_obj


class _Forward:
    """Decode, batch and run the model: the loop a run and its measuring pass share."""

    def __init__(
        self,
        loaded: LoadedModel,
        module: Any,
        batch_size: int,
        workers: int,
        amp: bool,
        channels_last: bool,
    ) -> None:
        self.loaded = loaded
        self.module = module
        self.batch_size = batch_size
        self.workers = workers
        self.amp = amp
        self.channels_last = channels_last

    def batches(
        self,
        paths: Sequence[Path],
        stack: contextlib.ExitStack,
        failed: Any = None,
    ) -> Iterator[tuple[list[tuple[int, tuple[int, int] | None, Any]], Any]]:
        """Yield ``([(index, size, input tensor on CPU)], logits)`` per batch; the recorder
        registered on the module holds that batch's captures. Unreadable images go to
        ``failed(index, reason)``."""
        import torch

        from actviz.pipeline import decode_batches

        loaded = self.loaded
        device = loaded.device
        autocast_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        decoded = decode_batches(
            paths,
            loaded.preprocess,
            batch_size=self.batch_size,
            workers=self.workers,
            pin_memory=device.type == "cuda",
        )
        # closing(): on Ctrl-C the decoder thread or worker processes stop now, not at GC.
        for batch in stack.enter_context(contextlib.closing(decoded)):
            good = []
            for item in batch:
                if item.tensor is None:
                    if failed is not None:
                        failed(item.index, item.error)
                else:
                    good.append((item.index, item.size, item.tensor))
            if not good:
                continue
            x = torch.stack([t for _, _, t in good]).to(device, non_blocking=True)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with (
                torch.inference_mode(),
                torch.autocast(device.type, dtype=autocast_dtype, enabled=self.amp),
            ):
                try:
                    logits = self.module(x)
                except RuntimeError as exc:
                    raise ModelError(
                        f"{loaded.name} failed on a batch starting with {paths[good[0][0]]}: "
                        f"{_first_line(exc)}"
                    ) from exc
            yield good, logits


def _shared_ranges(
    forward: _Forward,
    paths: Sequence[Path],
    recorder: Any,
    clip: tuple[float, float] | None,
) -> dict[str, tuple[float, float]]:
    """Per capture key, the value range over every image (clipped per image when asked)."""
    import torch

    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        for _good, _logits in forward.batches(paths, stack):
            for cap in recorder.captures:
                flat = recorder[cap.key].reshape(len(_good), -1)
                for row in flat:
                    finite = row[row.isfinite()]
                    if not finite.numel():
                        continue
                    if clip is None:
                        lo, hi = float(finite.min()), float(finite.max())
                    else:
                        if finite.numel() > 1_000_000:  # quantile's input limit; a fair sample
                            finite = finite[:: finite.numel() // 1_000_000 + 1]
                        q = torch.tensor([clip[0] / 100, clip[1] / 100], dtype=finite.dtype)
                        lo, hi = (float(v) for v in torch.quantile(finite, q))
                    lows[cap.key] = min(lo, lows.get(cap.key, lo))
                    highs[cap.key] = max(hi, highs.get(cap.key, hi))
    return {key: (lows[key], highs[key]) for key in lows}


def _checked_clip(clip: tuple[float, float] | None) -> tuple[float, float] | None:
    if clip is None:
        return None
    lo, hi = clip
    if not 0 <= lo < hi <= 100:
        raise UsageError(f"--clip needs 0 <= LO < HI <= 100, e.g. 1,99; got {lo},{hi}")
    return (float(lo), float(hi))


def _checked_cmap(cmap: str | None) -> str | None:
    if cmap is None:
        return None
    from actviz.render import colormap_lut

    try:
        colormap_lut(cmap)
    except ValueError as exc:
        raise UsageError(f"--cmap: {exc}") from None
    return cmap


def _reuse_earlier(records: Any, results: list[ImageResult]) -> None:
    """Mark images an earlier run completed (same settings, files still there) as reused."""
    done = records.completed()
    for result in results:
        earlier = done.get((str(result.path), result.out_dir.as_posix()))
        if earlier is None:
            continue
        result.status = "reused"
        result.size = tuple(earlier["size"]) if earlier.get("size") else None
        result.predictions = [
            Prediction(p["index"], p["label"], p["probability"]) for p in earlier["predictions"]
        ]
        result.layers = [
            LayerResult(
                key=x["name"],
                module=x["module"],
                module_type=x["type"],
                call=x["call"],
                shape=tuple(x["shape"]),
                min=_nan_if_none(x["min"]),
                max=_nan_if_none(x["max"]),
                mean=_nan_if_none(x["mean"]),
                channels_shown=x["channels_shown"],
                channels_total=x["channels_total"],
                file=x["file"],
                note=x.get("note"),
                kind=x.get("kind", "output"),
                layout=x.get("layout"),
                overlay=x.get("overlay"),
                tensor_file=x.get("tensor"),
            )
            for x in earlier["layers"]
        ]


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _render_threads() -> int:
    # Rendering is numpy and zlib, which release the GIL: one thread per core pays off.
    return max(2, min(8, os.cpu_count() or 2))


def _top_k(logits: object, row: int, categories: list[str] | None, k: int) -> list[Prediction]:
    import torch

    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or k <= 0:
        return []
    probs = logits[row].float().softmax(dim=0)
    values, indices = probs.topk(min(k, probs.numel()))
    return [
        Prediction(
            index=int(i),
            label=categories[int(i)] if categories and int(i) < len(categories) else None,
            probability=float(v),
        )
        for v, i in zip(values, indices, strict=True)
    ]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _random_weights_warning(loaded: LoadedModel) -> str:
    why = loaded.weights.reason or "no pretrained weights"
    return (
        f"RANDOM WEIGHTS: {why}. The grids show an untrained {loaded.name}; "
        "pass --weights none to say that is what you want."
    )
