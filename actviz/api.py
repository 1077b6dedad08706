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
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.draw import draw_image, render_activation, summaries
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
    from actviz.models import LoadedModel

__all__ = [
    "DEFAULT_LAYERS",
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

DEFAULT_LAYERS = "conv"


def run(
    model: str,
    inputs: Sequence[Path | str],
    *,
    layers: str | Sequence[str] = DEFAULT_LAYERS,
    out: Path | str = "actviz-out",
    weights: str = "auto",
    device: str = "auto",
    max_channels: int = 64,
    png_compression: int = 1,
    batch_size: int = 8,
    workers: int = 0,
    resume: bool = False,
    overwrite: bool = False,
    amp: bool = False,
    channels_last: bool = False,
    top_k: int = 5,
    reporter: Reporter | None = None,
) -> RunResult:
    """Run images through a model and write one feature-map grid PNG per selected layer.

    Args:
        model: A torchvision model name.
        inputs: Image files and/or folders (walked recursively).
        layers: Selector for the layers to draw (see ``actviz.selectors``).
        out: Output folder; gets ``<image>/<NN>_<layer>.png`` and ``manifest.json``.
        weights: ``auto``, ``default``, ``none``, an enum name, or a checkpoint path.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        max_channels: Channels drawn per grid at most (0 = all).
        png_compression: zlib level 0-9 for the PNGs (1 is fast and nearly as small).
        batch_size: Images per forward pass.
        workers: DataLoader worker processes for decoding (0: one background thread).
        resume: Skip images whose outputs an earlier run with the same settings completed.
        overwrite: Replace an earlier run's outputs in ``out``.
        amp: Autocast the forward pass (bfloat16 on CPU, float16 on CUDA); the maps are
            drawn in float32.
        channels_last: Run the model in channels-last memory format.
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
    from actviz.models import load_model
    from actviz.pipeline import decode_batches
    from actviz.selectors import select_layers

    started = time.perf_counter()
    report = reporter or SilentReporter()
    out_dir = Path(out)
    selector = layers if isinstance(layers, str) else ",".join(layers)
    if batch_size < 1 or workers < 0:
        raise UsageError("--batch-size must be at least 1 and --workers at least 0")

    found = image_io.discover([Path(p) for p in inputs])
    output.prepare_out_dir(out_dir, resume=resume, overwrite=overwrite)
    loaded = load_model(model, weights=weights, device=device)
    warnings: list[str] = []
    if loaded.weights.random and loaded.weights.spec != "none":
        warnings.append(_random_weights_warning(loaded))
        report.warn(warnings[-1])

    names = select_layers(layer_refs(loaded.module), layers, model=model)
    dirs = output.image_dirs([item.rel for item in found.images])
    results = [
        ImageResult(path=item.path, out_dir=folder)
        for item, folder in zip(found.images, dirs, strict=True)
    ]
    settings = {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "selector": selector,
        "max_channels": max_channels,
    }
    records = output.RunRecords(out_dir, settings)
    if resume:
        _reuse_earlier(records, results)
    elif overwrite:
        records.reset([r.out_dir for r in results])
    todo = [r for r in results if r.status != "reused"]

    module = loaded.module
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    autocast_dtype = torch.float16 if loaded.device.type == "cuda" else torch.bfloat16

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

    with (
        ActivationRecorder(module, names) as recorder,
        eval_mode(module),
        ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
        contextlib.ExitStack() as stack,
    ):
        try:
            batches = decode_batches(
                [r.path for r in todo],
                loaded.preprocess,
                batch_size=batch_size,
                workers=workers,
                pin_memory=loaded.device.type == "cuda",
            )
            # closing(): on Ctrl-C the decoder thread or worker processes stop now, not at GC.
            for batch in stack.enter_context(contextlib.closing(batches)):
                good = []
                for item in batch:
                    result = todo[item.index]
                    if item.tensor is None:
                        result.status, result.error = "failed", item.error
                        records.add(image_record(result))
                        report.advance(result)
                    else:
                        result.size = item.size
                        good.append((result, item.tensor))
                if not good:
                    continue
                x = torch.stack([t for _, t in good]).to(loaded.device, non_blocking=True)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                with (
                    torch.inference_mode(),
                    torch.autocast(loaded.device.type, dtype=autocast_dtype, enabled=amp),
                ):
                    try:
                        logits = module(x)
                    except RuntimeError as exc:
                        raise ModelError(
                            f"{model} failed on a batch starting with {good[0][0].path}: "
                            f"{_first_line(exc)}"
                        ) from exc
                never_ran.update(recorder.never_called())
                captures = recorder.captures
                layer_summaries = [summaries(recorder[cap.key]) for cap in captures]
                futures = []
                for i, (result, _) in enumerate(good):
                    result.predictions = _top_k(logits, i, loaded.categories, top_k)
                    futures.append(
                        pool.submit(
                            draw_image,
                            captures,
                            layer_summaries,
                            i,
                            result.out_dir,
                            out_dir,
                            max_channels,
                            png_compression,
                        )
                    )
                in_flight.append(([r for r, _ in good], futures))
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
            "batch_size": batch_size,
            "workers": workers,
            "amp": amp,
            "channels_last": channels_last,
            "png_compression": png_compression,
            "resume": resume,
            "overwrite": overwrite,
        },
    )
    output.write_json(manifest_path, manifest(result_obj, max_channels=max_channels))
    return result_obj


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
