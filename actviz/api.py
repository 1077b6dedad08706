"""The pipeline in one readable place: load -> select -> capture -> render -> write.

The CLI is a thin layer over these functions; they return small dataclasses, report progress
through an optional :class:`Reporter`, and raise :class:`~actviz.errors.ActvizError` subclasses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from actviz import __version__
from actviz.errors import ActvizError, ImageLoadError, ModelError

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

    @property
    def failed(self) -> list[ImageResult]:
        """Images that could not be processed."""
        return [r for r in self.images if r.status != "ok"]

    @property
    def files_written(self) -> int:
        """Number of grid PNGs written."""
        return sum(1 for r in self.images for layer in r.layers if layer.file)


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
    top_k: int = 5,
    reporter: Reporter | None = None,
) -> RunResult:
    """Run images through a model and write one feature-map grid PNG per selected layer.

    Args:
        model: A torchvision model name.
        inputs: Image files and/or folders.
        layers: Selector for the layers to draw (see ``actviz.selectors``).
        out: Output folder; gets ``<image>/<NN>_<layer>.png`` and ``manifest.json``.
        weights: ``auto``, ``default``, ``none``, an enum name, or a checkpoint path.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        max_channels: Channels drawn per grid at most (0 = all).
        png_compression: zlib level 0-9 for the PNGs (1 is fast and nearly as small).
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
    from actviz.selectors import select_layers

    started = time.perf_counter()
    report = reporter or SilentReporter()
    out_dir = Path(out)
    selector = layers if isinstance(layers, str) else ",".join(layers)

    found = image_io.discover([Path(p) for p in inputs])
    output.prepare_out_dir(out_dir)
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
    report.start(len(results))
    never_ran: set[str] = set()
    with ActivationRecorder(loaded.module, names) as recorder, eval_mode(loaded.module):
        for result in results:
            try:
                picture = image_io.load_rgb(result.path)
            except ImageLoadError as exc:
                result.status, result.error = "failed", exc.reason
                report.advance(result)
                continue
            result.size = picture.size
            batch = loaded.preprocess(picture).unsqueeze(0).to(loaded.device)
            with torch.inference_mode():
                try:
                    logits = loaded.module(batch)
                except RuntimeError as exc:
                    raise ModelError(f"{model} failed on {result.path}: {exc}") from exc
            result.predictions = _top_k(logits, loaded.categories, top_k)
            never_ran.update(recorder.never_called())
            result.layers = _write_layers(
                recorder, result, out_dir, max_channels=max_channels, level=png_compression
            )
            report.advance(result)
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
    )
    output.write_json(manifest_path, manifest(result_obj, max_channels=max_channels))
    return result_obj


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
            "reason": weights.reason,
        },
        "device": result.device,
        "selector": result.selector,
        "layers": result.layers,
        "render": {"max_channels": max_channels, "norm": "channel"},
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


def _write_layers(
    recorder: Any, result: ImageResult, out_dir: Path, *, max_channels: int, level: int
) -> list[LayerResult]:
    from actviz import output

    captures = recorder.captures
    width = max(2, len(str(len(captures) - 1)))
    written: list[LayerResult] = []
    for index, cap in enumerate(captures):
        sample = cap.tensor[0]
        shape = (1, *sample.shape)
        finite = sample[sample.isfinite()]
        lo, hi, mean = (
            (float(finite.min()), float(finite.max()), float(finite.mean()))
            if finite.numel()
            else (math.nan, math.nan, math.nan)
        )
        title = f"{cap.key}   {cap.module_type}   {tuple(shape)}"
        try:
            grid = render_activation(sample, title=title, max_channels=max_channels)
        except ValueError as exc:
            written.append(
                LayerResult(
                    cap.key,
                    cap.module,
                    cap.module_type,
                    cap.call,
                    shape,
                    lo,
                    hi,
                    mean,
                    0,
                    0,
                    None,
                    note=str(exc),
                )
            )
            continue
        rel = result.out_dir / output.layer_filename(index, cap.key, width=width)
        output.write_png(out_dir / rel, grid.to_pil(), compress_level=level)
        written.append(
            LayerResult(
                cap.key,
                cap.module,
                cap.module_type,
                cap.call,
                shape,
                lo,
                hi,
                mean,
                grid.channels_shown,
                grid.channels_total,
                str(rel),
            )
        )
    return written


def _top_k(logits: object, categories: list[str] | None, k: int) -> list[Prediction]:
    import torch

    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or k <= 0:
        return []
    probs = logits[0].float().softmax(dim=0)
    values, indices = probs.topk(min(k, probs.numel()))
    return [
        Prediction(
            index=int(i),
            label=categories[int(i)] if categories and int(i) < len(categories) else None,
            probability=float(v),
        )
        for v, i in zip(values, indices, strict=True)
    ]


def _random_weights_warning(loaded: LoadedModel) -> str:
    why = loaded.weights.reason or "no pretrained weights"
    return (
        f"RANDOM WEIGHTS: {why}. The grids show an untrained {loaded.name}; "
        "pass --weights none to say that is what you want."
    )


def _default(model: str, enum_of: Any) -> Any:
    enum_cls = enum_of(model)
    return getattr(enum_cls, "DEFAULT", None) if enum_cls is not None else None


_ = ActvizError  # re-exported for callers that catch errors from the API
