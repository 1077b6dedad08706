"""The pipeline in one readable place: load -> select -> capture -> render -> write.

The CLI is a thin layer over these functions; they return small dataclasses, report progress
through an optional :class:`Reporter`, and raise :class:`~actviz.errors.ActvizError` subclasses.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ActvizError, UsageError
from actviz.forward import BatchForward, model_failure, shared_ranges, top_k_predictions
from actviz.gradients.backward import (
    backward,
    choose_cam_keys,
    write_flow_chart,
    write_run_flow_chart,
)
from actviz.models.listing import LayerInfo, LayerListing, list_layers
from actviz.render.draw import (
    DrawOptions,
    ImageJob,
    Norm,
    TensorFormat,
    draw_image,
    render_activation,
    summaries,
    thumbnail_path,
)
from actviz.results import (
    ImageResult,
    LayerResult,
    Prediction,
    Reporter,
    RunResult,
    SilentReporter,
    image_record,
    manifest,
    reuse_earlier,
)
from actviz.stats.collect import stats_callback, write_stats

if TYPE_CHECKING:
    from actviz.hooks import CaptureMode
    from actviz.layouts import Layout
    from actviz.models.registry import LoadedModel
    from actviz.render.grid import Order
    from actviz.stats import Thresholds

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
    stats: bool = True,
    grids: bool = True,
    report: bool = True,
    thresholds: Thresholds | None = None,
    grads: bool = False,
    target: str = "top1",
    cam: bool = False,
    cam_classes: int = 1,
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
        stats: Compute per-layer statistics and anomaly flags (``stats.json``,
            ``stats.csv``), on the device where the activation is.
        grids: Draw the grid PNGs (False: statistics only, much faster).
        report: Write the static HTML report ``index.html``.
        thresholds: Anomaly thresholds (``actviz.stats.compute.Thresholds``); None for the defaults.
        grads: Also backpropagate from ``target`` and draw each layer's gradient
            (``<NN>_<layer>_grad.png``), with a gradient-flow chart per image and for the run.
        target: What to backpropagate from: ``top1`` (each image its own top class), a class
            index, or a class name.
        cam: Grad-CAM over the input for the selected layers (without ``layers``: the last
            spatial layer), ``<NN>_<layer>_cam.png``.
        cam_classes: Grad-CAMs of this many top classes side by side.
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
    from actviz.models.registry import load_model
    from actviz.selectors import select_layers

    started = time.perf_counter()
    notify = reporter or SilentReporter()
    out_dir = Path(out)
    if batch_size < 1 or workers < 0:
        raise UsageError("--batch-size must be at least 1 and --workers at least 0")
    if cam_classes < 1:
        raise UsageError("--cam-classes must be at least 1")
    cam = cam or cam_classes > 1
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
        grids=grids,
    )

    found = image_io.discover([Path(p) for p in inputs])
    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; choose one")
    created = not out_dir.exists()
    output.prepare_out_dir(out_dir, resume=resume, overwrite=overwrite)
    # A run that fails before writing anything leaves no empty folder behind.
    with output.removed_if_empty(out_dir, created):
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
            notify.warn(warnings[-1])

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
            "grads": [grads, target, cam, cam_classes],
        }
        records = output.RunRecords(out_dir, settings)
        if resume:
            reuse_earlier(records.completed(), results)
        elif overwrite:
            records.reset([r.out_dir for r in results])
        todo = [r for r in results if r.status != "reused"]

        if channels_last:
            module = module.to(memory_format=torch.channels_last)
        forward = BatchForward(loaded, module, batch_size, workers, amp, channels_last)

        # Statistics are computed where the activation is: on an accelerator inside the hook,
        # before the copy; on the CPU in the render threads, where they run in parallel.
        on_cpu = loaded.device.type == "cpu"
        summarize = stats_callback(contexts) if stats and not on_cpu else None
        stats_in_threads = stats_callback(contexts) if stats and on_cpu else None
        ranges: dict[str, tuple[float, float]] = {}
        if draw.norm == "shared":
            # One scale per layer for the whole run needs every image's range before drawing.
            with ActivationRecorder(module, names, mode=capture) as recorder, eval_mode(module):
                ranges = shared_ranges(forward, [r.path for r in results], recorder, draw.clip)

        notify.start(len(results))
        for result in results:
            if result.status == "reused":
                notify.advance(result)
        never_ran: set[str] = set()
        cam_keys: frozenset[str] | None = None
        in_flight: deque[tuple[list[ImageResult], list[Future[list[LayerResult]]]]] = deque()

        def settle(batch: list[ImageResult], futures: list[Future[list[LayerResult]]]) -> None:
            for result, future in zip(batch, futures, strict=True):
                result.layers = future.result()
                if grads:
                    result.gradient_flow = write_flow_chart(out_dir, result)
                records.add(image_record(result))
                notify.advance(result)

        def failed(index: int, error: str | None) -> None:
            result = todo[index]
            result.status, result.error = "failed", error
            records.add(image_record(result))
            notify.advance(result)

        with (
            ActivationRecorder(module, names, mode=capture, summarize=summarize) as recorder,
            eval_mode(module),
            ThreadPoolExecutor(_render_threads(), thread_name_prefix="actviz-render") as pool,
            contextlib.ExitStack() as stack,
        ):
            try:
                for good, logits, x in forward.batches([r.path for r in todo], stack, failed):
                    never_ran.update(recorder.never_called())
                    captures = recorder.captures
                    layer_summaries = [summaries(recorder[cap.key]) for cap in captures]
                    if cam and cam_keys is None:
                        cam_keys = choose_cam_keys(captures, contexts, explicit=layers is not None)
                    gradients: Mapping[str, Any] = {}
                    targets: list[int] = []
                    class_maps: dict[str, list[list[Any]]] = {}
                    if grads or cam:
                        try:
                            with recorder.paused():
                                gradients, targets, class_maps = backward(
                                    module,
                                    x,
                                    names
                                    if grads
                                    else sorted({k.split(":")[0] for k in cam_keys or ()}),
                                    target=target,
                                    categories=loaded.categories,
                                    cam_keys=cam_keys or frozenset(),
                                    cam_classes=cam_classes,
                                    contexts=contexts,
                                )
                        except ActvizError:
                            raise
                        except Exception as exc:  # the model's own code in the backward pass
                            raise model_failure(model, todo[good[0][0]].path, exc, x) from exc
                    futures = []
                    for i, (index, size, x_cpu) in enumerate(good):
                        result = todo[index]
                        result.size = size
                        result.predictions = top_k_predictions(logits, i, loaded.categories, top_k)
                        job = ImageJob(
                            captures=captures,
                            summaries=layer_summaries,
                            index=i,
                            folder=result.out_dir,
                            out_dir=out_dir,
                            options=draw,
                            contexts=contexts,
                            ranges=ranges,
                            model_input=x_cpu if (draw.overlay or report or cam) else None,
                            mean=loaded.preprocess.mean,
                            std=loaded.preprocess.std,
                            thumbnail=report,
                            gradients=gradients
                            if grads
                            else {k: v for k, v in gradients.items() if k in (cam_keys or ())},
                            gradient_grids=grads,
                            stats_fn=stats_in_threads,
                            target=targets[i] if targets else None,
                            cam_keys=cam_keys or frozenset(),
                            class_cams={key: maps[i] for key, maps in class_maps.items()},
                        )
                        if report:
                            result.thumbnail = thumbnail_path(result.out_dir).as_posix()
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
            notify.warn(warnings[-1])

        stats_doc = write_stats(out_dir, results, thresholds) if stats else None
        flow = write_run_flow_chart(out_dir, results) if grads else None
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
            stats=stats_doc,
            report=out_dir / "index.html" if report else None,
            gradient_flow=flow,
        )
        record = manifest(result_obj)
        output.write_json(manifest_path, record)
        if report:
            from actviz.report.pages import build_report

            for rel, data in build_report(record, stats_doc, out_dir_name=out_dir.name).items():
                output.write_bytes(out_dir / rel, data)
        return result_obj


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


def _render_threads() -> int:
    # Rendering is numpy and zlib, which release the GIL: one thread per core pays off.
    return max(2, min(8, os.cpu_count() or 2))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _random_weights_warning(loaded: LoadedModel) -> str:
    why = loaded.weights.reason or "no pretrained weights"
    return (
        f"RANDOM WEIGHTS: {why}. The grids show an untrained {loaded.name}; "
        "pass --weights none to say that is what you want."
    )
