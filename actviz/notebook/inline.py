"""``actviz.show``: one image through a model, its layers drawn in memory as the command line
draws them, and nothing written unless asked.

The pictures come from the run's own makers (:data:`actviz.run.pictures.PICTURE_KINDS`): the
same headers, colormaps, token and channels-last layouts, random-weights note and Grad-CAM
panels; a histogram of the values is the one kind of its own.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from actviz import output
from actviz.cards import Card, Picture, Table, Thumb, picture_of, thumb_from_array
from actviz.cards.results import RANDOM_WARNING, fmt, weights_text
from actviz.command.session import open_model, restoring
from actviz.errors import UsageError
from actviz.hooks import ActivationRecorder, eval_mode, layer_refs
from actviz.io.images import load_rgb
from actviz.layouts import default_selector, layer_contexts
from actviz.models.options import LoadOptions
from actviz.notebook.drawing import draw_picture, image_job
from actviz.run.options import DrawOptions
from actviz.selectors import select_layers

if TYPE_CHECKING:
    import torch

    from actviz.hooks import Capture
    from actviz.models import LoadedModel
    from actviz.run.job import ImageJob
    from actviz.run.options import DrawOptions

__all__ = ["KINDS", "Look", "show"]

#: What :meth:`Look.show` draws.
KINDS = ("grid", "cam", "pca", "hist")
#: Layers a :class:`Look`'s card draws (the rest are listed).
CARD_LAYERS = 4


def show(
    model: str | Any,
    image: Any,
    layers: str | Sequence[str] | None = None,
    *,
    weights: str = "auto",
    device: str = "auto",
    preprocess: Any = None,
    target: str = "top1",
    **draw: Any,
) -> Look:
    """Run one image through a model and keep its layers' outputs, to look at in a notebook.

    Example:
        >>> look = actviz.show(model, "cat.jpg", layers="conv")
        >>> look                                   # a card: each layer's grid, the weights
        >>> look.show("layer1.0.conv1", kind="cam")  # grid, cam, pca or hist: a picture

    Args:
        model: A model name (``resnet18``) or an ``nn.Module`` (given back as it came).
        image: A path, a Pillow image (preprocessed as the model's run would), or a tensor
            ``(C, H, W)`` / ``(1, C, H, W)`` already preprocessed.
        layers: The selector (as ``--layers``); default: the architecture's default.
        weights, device, preprocess: As for :func:`actviz.run`.
        target: The class of the Grad-CAM pictures (``top1``, a class index, or a class name).
        **draw: Drawing options of :class:`~actviz.run.options.DrawOptions` (``max_channels``,
            ``order``, ``norm``, ``clip``, ``cmap``, ``layout``).

    Raises:
        UsageError: For an image that is none of those, or an unknown drawing option.
    """

    import torch

    known = {f.name for f in dataclasses.fields(DrawOptions)}
    unknown = sorted(set(draw) - known)
    if unknown:
        raise UsageError(f"show() has no option {unknown[0]!r}; drawing options: {sorted(known)}")
    options = DrawOptions(**draw)
    with restoring(model):
        loaded = open_model(
            model, LoadOptions(weights=weights, device=device, preprocess=preprocess)
        )
        x = _input(image, loaded)
        selector = layers if layers is not None else default_selector(loaded.module)
        label = model if isinstance(model, str) else type(model).__name__
        names = select_layers(layer_refs(loaded.module), selector, model=label)
        with (
            ActivationRecorder(loaded.module, names, per_image=True) as recorder,
            eval_mode(loaded.module),
        ):
            with torch.inference_mode():
                loaded.module(x[None].to(loaded.device))
            captures = list(recorder.captures)
    contexts = layer_contexts(loaded.module, (int(x.shape[-2]), int(x.shape[-1])))
    return Look(label, loaded, x, captures, contexts, options, target)


def _input(image: Any, loaded: LoadedModel) -> torch.Tensor:
    """The model's input for one image: a file or a Pillow image preprocessed, a tensor as
    it is."""
    import torch

    if isinstance(image, str | Path):
        image = load_rgb(Path(image))
    if isinstance(image, Image.Image):
        return loaded.preprocess(image.convert("RGB"))
    if isinstance(image, torch.Tensor):
        x = image.detach().float().cpu()
        if x.dim() == 4 and x.shape[0] == 1:
            x = x[0]
        if x.dim() == 3:
            return x
        got: object = tuple(image.shape)
    else:
        got = type(image).__name__
    raise UsageError(
        f"show() takes one image: a path, a PIL image or a (C, H, W) tensor, not {got}"
    )


@dataclass
class Look:
    """One image's layers, captured in memory (:func:`show`).

    Attributes:
        model: The model's name.
        loaded: The model as it ran.
        x: The model's input, ``(C, H, W)``, on the CPU.
        captures: The captured outputs, in capture order.
        contexts: What the model's structure says about each module.
        options: How the pictures are drawn.
        target: The Grad-CAM class.
    """

    model: str
    loaded: Any
    x: Any
    captures: list[Capture]
    contexts: Mapping[str, Any]
    options: DrawOptions
    target: str = "top1"
    _pictures: dict[tuple[str, str], Picture] = field(default_factory=dict, repr=False)

    @property
    def layers(self) -> list[str]:
        """The capture keys, in capture order."""
        return [cap.key for cap in self.captures]

    def __getitem__(self, key: str) -> Any:
        """One layer's output for the image, ``(1, ...)`` on the CPU."""
        return self._capture(key).tensor

    def _capture(self, key: str) -> Capture:
        for cap in self.captures:
            if cap.key == key:
                return cap
        shown = ", ".join(self.layers[:8]) + (", ..." if len(self.layers) > 8 else "")
        raise UsageError(f"no layer {key!r} was captured; captured: {shown}")

    def show(self, layer: str | None = None, kind: str = "grid") -> Picture:
        """One layer's picture, as ``actviz run`` draws it (``kind``: ``grid``, ``cam``,
        ``pca``; ``hist`` for a histogram of its values). Default layer: the first."""
        if kind not in KINDS:
            raise UsageError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        key = layer if layer is not None else self.layers[0]
        cap = self._capture(key)
        cached = self._pictures.get((key, kind))
        if cached is None:
            cached = self._pictures[(key, kind)] = self._draw(cap, kind)
        return cached

    def _draw(self, cap: Capture, kind: str) -> Picture:

        png = draw_picture(self, cap, kind)
        if png is None:
            raise UsageError(f"no {kind} picture of {cap.key}: {self._why(cap, kind)}")
        return picture_of(png, f"{cap.key} ({kind})")

    def _why(self, cap: Capture, kind: str) -> str:
        if kind == "cam":
            return "Grad-CAM needs a classifier and a layer with spatial maps"
        if kind == "pca":
            return "its output has no spatial positions"
        return "its output cannot be drawn"

    def job(self, cap: Capture, **fields: Any) -> ImageJob:
        """The run's drawing job for this image and capture (see :mod:`actviz.notebook.drawing`)."""

        return image_job(self, cap, **fields)

    def save(self, out: str | Path, kind: str = "grid") -> list[Path]:
        """Write every layer's picture of ``kind`` into ``out`` (named as a run names them);
        returns the files."""

        folder = Path(out)
        width = output.order_width(len(self.captures))
        written = []
        for order, cap in enumerate(self.captures):
            try:
                picture = self.show(cap.key, kind)
            except UsageError:
                continue
            name = output.layer_filename(order, cap.key, width=width)
            path = folder / (name if kind == "grid" else name.replace(".png", f"_{kind}.png"))
            output.write_bytes(path, picture.png)
            written.append(path)
        return written

    def card(self, pictures: bool = True) -> Card:
        """The card: the weights, each layer's shape and range, the first layers' grids
        (``pictures``: draw them)."""

        rows = []
        for cap in self.captures[:12]:
            values = cap.tensor.numpy() if cap.tensor is not None else np.zeros(0)
            finite = values[np.isfinite(values)] if values.size else values
            rows.append(
                [
                    cap.key,
                    cap.module_type,
                    "x".join(str(n) for n in cap.shape[1:]),
                    fmt(float(finite.min())) if finite.size else "-",
                    fmt(float(finite.max())) if finite.size else "-",
                    fmt(float(finite.mean())) if finite.size else "-",
                ]
            )
        thumbs = []
        for cap in self.captures[:CARD_LAYERS] if pictures else []:
            try:
                picture = self.show(cap.key, "grid")
            except UsageError:
                continue
            thumbs.append(_thumb(picture, cap.key))
        weights = self.loaded.weights
        return Card(
            kind="show",
            title=self.model,
            summary=(
                f"Look(model={self.model!r}, weights={weights_text(weights)!r}, "
                f"input={tuple(self.x.shape)}, layers={len(self.captures)})"
            ),
            facts=[
                ("weights", weights_text(weights)),
                ("input", "x".join(str(n) for n in self.x.shape)),
                ("layers", f"{len(self.captures)}: .show(layer, kind='grid'|'cam'|'pca'|'hist')"),
            ],
            warnings=[RANDOM_WARNING] if weights.random else [],
            table=Table(
                ["layer", "type", "shape", "min", "max", "mean"], rows, len(self.captures), "layers"
            ),
            thumbs=thumbs,
            more_thumbs=max(0, len(self.captures) - len(thumbs)),
        )

    def __repr__(self) -> str:
        return self.card(pictures=False).text()

    def _repr_html_(self) -> str:
        return self.card().html()


def _thumb(picture: Picture, label: str) -> Thumb:
    """A grid as a card's thumbnail (made smaller when it is large)."""

    with Image.open(io.BytesIO(picture.png)) as image:
        return thumb_from_array(image.convert("RGB"), label)
