"""The library face of ``actviz run``, ``list-layers`` and of drawing one activation.

Each command lives in its family (``actviz.run``, ``actviz.top_images``, ``actviz.diff``); this
module gathers the names the package re-exports, :func:`list_layers` for a model name or a
module object, :func:`read_images`, which refuses a folder that holds no run, and
:func:`render_activation`, which draws one activation without a run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.command.session import hookable_module, restoring
from actviz.errors import ModelError, UsageError, first_line
from actviz.layouts import to_drawable
from actviz.models import LayerListing, Preprocessing
from actviz.models import list_layers as _list_named
from actviz.models.listing import listing_of, trace, trace_with, traced_input_shape
from actviz.render import grid as render
from actviz.render.timestrips import render_time_strips
from actviz.results import ImageResult
from actviz.run.command import run
from actviz.run.records import RunRecords
from actviz.run.result import RunResult
from actviz.run.sink import read_images as read_ledger

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from actviz.layouts import LayerContext, Layout
    from actviz.render import GridImage

__all__ = [
    "ImageResult",
    "LayerListing",
    "RunResult",
    "list_layers",
    "read_images",
    "render_activation",
    "run",
]


def list_layers(
    model: str | nn.Module,
    *,
    layers: str | Sequence[str] | None = None,
    input_size: tuple[int, int] | None = None,
    in_chans: int = 3,
    input_data: Any = None,
) -> LayerListing:
    """Every module of a model in the order it produces output, with output shapes.

    A name is built on the ``meta`` device by its source (no weights, no download: see
    :func:`actviz.models.list_layers`); a module object runs once, under
    ``torch.inference_mode()``, on ``input_data`` when given, else on zeros of an image batch
    where its parameters are (a still clip for a video model), and is given back in its
    training mode.

    Args:
        model: A model name (``actviz models``), ``package.module:factory`` /
            ``path/to/file.py:factory``, or an ``nn.Module``.
        layers: Optional selector; matching rows are marked and counted.
        input_size: ``(height, width)`` of the input to trace with; default: the model's
            crop size for a name, 224 x 224 for a module.
        in_chans: 3 for RGB input, 1 for greyscale.
        input_data: For a module that does not take an image batch (vectors, sequences,
            several arguments), an example input as you would call it: a tensor
            (``model(x)``), a tuple or list (``model(*args)``) or a dict (``model(**kwargs)``),
            used as it is (its device included). As ``actviz.capture`` sees what the model
            is called with.

    Raises:
        UsageError: For a model that is neither a name nor a module, ``in_chans`` not 1 or 3,
            or ``input_data`` with a name or beside ``input_size``; and as
            :func:`actviz.models.list_layers` raises for a name.
        ModelError: For a TorchScript or compiled module, or one that cannot run on the
            input (the message names the shape it was given and what to pass instead).
        LayerSelectionError: If the selector matches nothing.
    """
    if input_data is not None and (isinstance(model, str) or input_size is not None):
        what = "a model name, which is traced on its own input" if isinstance(model, str) else ""
        raise UsageError(
            f"input_data is the input of a module object; not with {what or 'input_size'}"
        )
    if isinstance(model, str):
        return _list_named(model, layers=layers, input_size=input_size, in_chans=in_chans)
    return _list_module(model, layers, input_size, in_chans, input_data)


def _list_module(
    model: object,
    layers: str | Sequence[str] | None,
    input_size: tuple[int, int] | None,
    in_chans: int,
    input_data: Any,
) -> LayerListing:
    """:func:`list_layers` for a module object: one forward on ``input_data`` (or zeros as
    its family feeds an image batch), every module hooked."""
    from torch import nn

    label = hookable_module(model, in_chans, takes="list_layers takes", chans="in_chans")
    assert isinstance(model, nn.Module)
    device = next((t.device for t in (*model.parameters(), *model.buffers())), None)
    if input_data is not None:
        shape = _data_shape(input_data)
        try:
            with restoring(model):
                recorder = trace_with(model, input_data)
        except Exception as exc:  # the user's forward: report it, whatever it raised
            raise ModelError(
                f"cannot run {label} on input_data {shape}: {type(exc).__name__}: "
                f"{first_line(exc)}; pass input_data as the model is called (a tensor, a "
                "tuple of arguments or a dict of keywords)"
            ) from exc
        return listing_of(
            model, recorder, model=label, input_shape=_first_shape(input_data), layers=layers
        )
    input_shape = _fed_shape(model, input_size, in_chans)
    try:
        with restoring(model):
            recorder = trace(model, input_shape, device or _cpu())
    except Exception as exc:  # the user's forward: report it, whatever it raised
        raise ModelError(
            f"cannot run {label} on a zero input of shape {input_shape}: "
            f"{type(exc).__name__}: {first_line(exc)}; pass the input size and channels an "
            "image model takes (input_size=(H, W), in_chans=1 or 3), or an example input "
            "for any other (input_data=x, a tuple of arguments or a dict of keywords)"
        ) from exc
    return listing_of(model, recorder, model=label, input_shape=input_shape, layers=layers)


def _fed_shape(
    model: nn.Module, input_size: tuple[int, int] | None, in_chans: int
) -> tuple[int, ...]:
    """The zero input's shape as the module's family feeds it: ``(1, C, H, W)``, or a video
    model's still clip ``(1, C, T, H, W)`` and a flow model's pair, as a listing by name."""

    base = Preprocessing.fitted(input_size=input_size or (224, 224), in_chans=in_chans)
    return traced_input_shape(model, base, input_size)


def _data_shape(data: Any) -> str:
    """What ``input_data`` holds, for a message: its tensors' shapes."""
    if hasattr(data, "shape"):
        return f"of shape {tuple(data.shape)}"
    if isinstance(data, dict):
        parts = [
            f"{k}={tuple(v.shape) if hasattr(v, 'shape') else type(v).__name__}"
            for k, v in data.items()
        ]
        return "{" + ", ".join(parts) + "}"
    if isinstance(data, (tuple, list)):
        return (
            "("
            + ", ".join(
                str(tuple(v.shape)) if hasattr(v, "shape") else type(v).__name__ for v in data
            )
            + ")"
        )
    return f"of type {type(data).__name__}"


def _first_shape(data: Any) -> tuple[int, ...]:
    """The shape of the first tensor in ``input_data``, the listing's input shape."""
    values = (
        data.values()
        if isinstance(data, dict)
        else data
        if isinstance(data, (tuple, list))
        else [data]
    )
    for value in values:
        if hasattr(value, "shape"):
            return tuple(int(n) for n in value.shape)
    return ()


def _cpu() -> torch.device:
    import torch

    return torch.device("cpu")


def read_images(out: Path | str) -> Iterator[dict[str, Any]]:
    """Every image record of the run in ``out``, read from its ledger one at a time (see
    :func:`actviz.run.sink.read_images`); the folder is checked at once, not when the
    records are first read.

    Example:
        >>> for image in actviz.read_images("actviz-out"):
        ...     print(image["path"], image["predictions"][0]["label"])

    Raises:
        UsageError: When ``out`` does not exist, is not a folder, or holds no run's records.
    """

    folder = Path(out)
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise UsageError(
            f"{folder} {what}; give the output folder of a run (its --out, 'actviz-out' by default)"
        )
    if not (folder / RunRecords.FILE).is_file():
        raise UsageError(
            f"{folder} holds no run's records ({RunRecords.FILE}); give the output folder of "
            "`actviz run` or `actviz stats` (a run of an earlier version: run it again)"
        )
    return read_ledger(folder)


def render_activation(
    activation: torch.Tensor | np.ndarray,
    *,
    title: str = "",
    max_channels: int = 64,
    context: LayerContext | None = None,
    layout: Layout = "auto",
    **render_options: Any,
) -> GridImage:
    """Draw one activation of one image as a grid (or a strip, for a vector).

    Args:
        activation: One image's output: ``(C, H, W)`` maps, ``(H, W, C)`` channels-last,
            ``(1 + H*W, C)`` tokens, or ``(C,)``; a clip's ``(C, T, H, W)`` (drawn as time
            strips). A leading batch dimension of 1 is dropped.
        title: The header's first line.
        max_channels: Channels drawn at most (0 = all).
        context: What the model says about the layer (``actviz.layouts.layer_contexts``).
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        **render_options: Passed to ``actviz.render.grid.render_grid`` (``order``, ``norm``,
            ``value_range``, ``clip``, ``cmap``).

    Returns:
        The picture; ``.to_pil()`` gives a Pillow image, ``.to_rgb()`` an array.

    Raises:
        ValueError: When the activation cannot be drawn; the message says why.
    """

    array = np.asarray(
        activation.detach().cpu().float().numpy() if hasattr(activation, "detach") else activation,
        dtype=np.float32,
    )
    if array.ndim in (4, 5) and array.shape[0] == 1:
        array = array[0]
    drawable = to_drawable(array, context, layout=layout)
    if drawable.kind == "none" or drawable.array is None:
        raise ValueError(drawable.note or f"cannot draw an output of shape {array.shape}")
    if drawable.kind == "vector":
        return render.render_vector(drawable.array, title=title, cmap=render_options.get("cmap"))
    if drawable.kind == "clip":
        shared = {k: v for k, v in render_options.items() if k in ("order", "norm", "cmap")}
        return render_time_strips(
            drawable.array, title=title, max_channels=max_channels, prefix=drawable.prefix, **shared
        )
    return render.render_grid(
        drawable.array, title=title, max_channels=max_channels, **render_options
    )
