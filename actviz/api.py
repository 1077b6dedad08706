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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from actviz import __version__
from actviz.errors import ModelError, UsageError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from actviz.models import LoadedModel, WeightsInfo
    from actviz.render import GridImage

__all__ = [
    "ImageResult",
    "LayerInfo",
    "LayerResult",
    "Prediction",
    "Reporter",
    "RunResult",
    "list_layers",
    "render_activation",
    "run",
]

DEFAULT_LAYERS = "conv"


class Reporter(Protocol):
    """Receives what a run wants a person to know while it works. Every method is optional
    in spirit: :class:`SilentReporter` ignores everything."""

    def warn(self, message: str) -> None:
        """A problem that does not stop the run (random weights, a layer that never ran)."""

    def start(self, total: int) -> None:
        """The run is about to process ``total`` images."""

    def advance(self, result: ImageResult) -> None:
        """One image is done (or failed)."""


class SilentReporter:
    """A reporter that ignores everything: the default for library use."""

    def warn(self, message: str) -> None:
        """Ignore."""

    def start(self, total: int) -> None:
        """Ignore."""

    def advance(self, result: ImageResult) -> None:
        """Ignore."""


@dataclass(frozen=True)
class Prediction:
    """One of the top classes the model predicts for an image."""

    index: int
    label: str | None
    probability: float


@dataclass(frozen=True)
class LayerResult:
    """What was captured and drawn for one layer output of one image."""

    key: str
    module: str
    module_type: str
    call: int
    shape: tuple[int, ...]
    min: float
    max: float
    mean: float
    channels_shown: int
    channels_total: int
    file: str | None
    note: str | None = None


@dataclass
class ImageResult:
    """The outcome for one input image."""

    path: Path
    out_dir: PurePosixPath
    status: str = "ok"
    error: str | None = None
    size: tuple[int, int] | None = None
    layers: list[LayerResult] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)


@dataclass
class RunResult:
    """Everything a run did, as written to ``manifest.json``."""

    model: str
    weights: WeightsInfo
    device: str
    selector: str
    layers: list[str]
    out: Path
    images: list[ImageResult]
    skipped: list[tuple[Path, str]]
    seconds: float
    manifest: Path
    warnings: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[ImageResult]:
        """Images that could not be processed."""
        return [r for r in self.images if r.status == "failed"]

    @property
    def reused(self) -> list[ImageResult]:
        """Images an earlier run had completed (``--resume``)."""
        return [r for r in self.images if r.status == "reused"]

    @property
    def files_written(self) -> int:
        """Number of grid PNGs written."""
        return sum(1 for r in self.images if r.status == "ok" for layer in r.layers if layer.file)


@dataclass(frozen=True)
class LayerInfo:
    """One module as ``list-layers`` shows it."""

    name: str
    module_type: str
    shape: tuple[int, ...] | None
    calls: int
    params: int
    selected: bool


@dataclass(frozen=True)
class LayerListing:
    """The answer of :func:`list_layers`."""

    model: str
    input_shape: tuple[int, ...]
    layers: list[LayerInfo]
    selector: str | None
    grids: int


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
            records.add(_image_record(result))
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
                        records.add(_image_record(result))
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
                summaries = [_summaries(recorder[cap.key]) for cap in captures]
                futures = []
                for i, (result, _) in enumerate(good):
                    result.predictions = _top_k(logits, i, loaded.categories, top_k)
                    futures.append(
                        pool.submit(
                            _draw_image,
                            captures,
                            summaries,
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


def render_activation(
    activation: torch.Tensor | np.ndarray,
    *,
    title: str = "",
    max_channels: int = 64,
) -> GridImage:
    """Draw one activation of one image as a grid.

    Args:
        activation: ``(C, H, W)`` feature maps, ``(C,)`` a vector, or ``(N, C)`` drawn as one
            map. A leading batch dimension of 1 is dropped.
        title: The header's first line.
        max_channels: Channels drawn at most (0 = all).

    Returns:
        The picture; ``.to_pil()`` gives a Pillow image, ``.to_rgb()`` an array.

    Raises:
        ValueError: For tensors of other shapes.
    """
    import numpy as np

    from actviz import render

    array = np.asarray(
        activation.detach().cpu().float().numpy() if hasattr(activation, "detach") else activation,
        dtype=np.float32,
    )
    if array.ndim in (2, 4) and array.shape[0] == 1:
        array = array[0]
    if array.ndim == 1:
        return render.render_vector(array, title=title)
    if array.ndim == 2:
        return render.render_grid(array[None], title=title, max_channels=1)
    if array.ndim == 3:
        return render.render_grid(array, title=title, max_channels=max_channels)
    raise ValueError(f"cannot draw an activation of shape {tuple(array.shape)}")


def list_layers(model: str, *, layers: str | Sequence[str] | None = None) -> LayerListing:
    """Every module of a model in the order it produces output, with output shapes.

    Shapes come from a forward on the ``meta`` device: no weights, no download, no memory, so
    even ``vit_l_16`` lists in seconds.

    Args:
        model: A torchvision model name.
        layers: Optional selector; matching rows are marked and counted.

    Raises:
        UnknownModelError: If the name is not in torchvision's registry.
        LayerSelectionError: If the selector matches nothing.
    """
    import torch
    from torchvision import models

    from actviz.hooks import ActivationRecorder, layer_refs
    from actviz.models import _preprocess_for, _weights_enum, check_model_name
    from actviz.selectors import select_layers

    check_model_name(model)
    _, (height, width) = _preprocess_for(_default(model, _weights_enum))
    with torch.device("meta"):
        module = models.get_model(model, weights=None)
    module.eval()
    refs = layer_refs(module)
    names = [r.name for r in refs]
    chosen = set(select_layers(refs, layers, model=model)) if layers else set()
    input_shape = (1, 3, height, width)
    recorder = ActivationRecorder(module, names, keep_tensors=False)
    try:
        with recorder, torch.inference_mode():
            module(torch.empty(input_shape, device="meta"))
    except Exception as exc:  # some ops have no meta kernel; shapes are then unknown
        raise ModelError(f"cannot trace {model} on the meta device: {exc}") from exc
    first_shape: dict[str, tuple[int, ...]] = {}
    order: dict[str, int] = {}
    for cap in recorder.captures:
        first_shape.setdefault(cap.module, cap.shape)
        order.setdefault(cap.module, len(order))
    modules = dict(module.named_modules())
    rows = [
        LayerInfo(
            name=ref.name,
            module_type=ref.type_name,
            shape=first_shape.get(ref.name),
            calls=recorder.calls(ref.name),
            params=sum(p.numel() for p in modules[ref.name].parameters()),
            selected=ref.name in chosen,
        )
        for ref in refs
    ]
    rows.sort(key=lambda row: order.get(row.name, len(order)))
    grids = sum(
        sum(1 for cap in recorder.captures if cap.module == row.name)
        for row in rows
        if row.selected
    )
    return LayerListing(
        model=model,
        input_shape=input_shape,
        layers=rows,
        selector=None
        if layers is None
        else (layers if isinstance(layers, str) else ",".join(layers)),
        grids=grids,
    )


def manifest(result: RunResult, *, max_channels: int) -> dict[str, Any]:
    """The run as JSON-ready data: what ``manifest.json`` holds."""
    import PIL
    import torch
    import torchvision

    from actviz.models import RANDOM_SEED

    weights = result.weights
    return {
        "actviz": __version__,
        "versions": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": PIL.__version__,
        },
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": result.model,
        "weights": {
            "spec": weights.spec,
            "source": weights.source,
            "name": weights.name,
            "random": weights.random,
            "seed": RANDOM_SEED if weights.random else None,
            "reason": weights.reason,
        },
        "device": result.device,
        "selector": result.selector,
        "layers": result.layers,
        "render": {"max_channels": max_channels, "norm": "channel"},
        "options": result.options,
        "seconds": round(result.seconds, 3),
        "images": [_image_record(r) for r in result.images],
        "skipped": [{"path": str(p), "reason": why} for p, why in result.skipped],
        "warnings": result.warnings,
    }


def _image_record(result: ImageResult) -> dict[str, Any]:
    return {
        "path": str(result.path),
        "out_dir": str(result.out_dir),
        "status": result.status,
        "error": result.error,
        "size": list(result.size) if result.size else None,
        "predictions": [
            {"index": p.index, "label": p.label, "probability": round(p.probability, 6)}
            for p in result.predictions
        ],
        "layers": [
            {
                "name": layer.key,
                "module": layer.module,
                "type": layer.module_type,
                "call": layer.call,
                "shape": list(layer.shape),
                "min": _finite(layer.min),
                "max": _finite(layer.max),
                "mean": _finite(layer.mean),
                "channels_shown": layer.channels_shown,
                "channels_total": layer.channels_total,
                "file": layer.file,
                "note": layer.note,
            }
            for layer in result.layers
        ],
    }


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def _draw_image(
    captures: Sequence[Any],
    summaries: Sequence[Sequence[tuple[float, float, float]]],
    index: int,
    folder: PurePosixPath,
    out_dir: Path,
    max_channels: int,
    level: int,
) -> list[LayerResult]:
    """Draw and write every capture of one image of a batch, one PNG each."""
    from actviz import output

    width = max(2, len(str(len(captures) - 1)))
    drawn: list[LayerResult] = []
    for order, cap in enumerate(captures):
        sample = cap.tensor[index]
        shape = (1, *sample.shape)
        lo, hi, mean = summaries[order][index]
        title = f"{cap.key}   {cap.module_type}   {shape}"
        common = (cap.key, cap.module, cap.module_type, cap.call, shape, lo, hi, mean)
        try:
            grid = render_activation(sample, title=title, max_channels=max_channels)
        except ValueError as exc:
            drawn.append(LayerResult(*common, 0, 0, None, note=str(exc)))
            continue
        rel = folder / output.layer_filename(order, cap.key, width=width)
        output.write_png(out_dir / rel, grid.to_pil(), compress_level=level)
        drawn.append(LayerResult(*common, grid.channels_shown, grid.channels_total, rel.as_posix()))
    return drawn


def _summaries(batch: torch.Tensor) -> list[tuple[float, float, float]]:
    """Per image of a batch: min, max and mean over finite values (NaN when there are none).

    One vectorized pass per layer and batch; the masked path runs only for rows holding NaN
    or Inf.
    """
    import torch

    flat = batch.reshape(batch.shape[0], -1)
    if flat.shape[1] == 0:
        return [(math.nan, math.nan, math.nan)] * flat.shape[0]
    lo, hi = torch.aminmax(flat, dim=1)
    mean = flat.mean(dim=1)
    rows = list(zip(lo.tolist(), hi.tolist(), mean.tolist(), strict=True))
    for i, row in enumerate(rows):
        if not all(math.isfinite(v) for v in row):
            finite = flat[i][flat[i].isfinite()]
            rows[i] = (
                (float(finite.min()), float(finite.max()), float(finite.mean()))
                if finite.numel()
                else (math.nan, math.nan, math.nan)
            )
    return rows


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


def _default(model: str, enum_of: Any) -> Any:
    enum_cls = enum_of(model)
    return getattr(enum_cls, "DEFAULT", None) if enum_cls is not None else None
