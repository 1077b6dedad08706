"""How points are coloured: each way is a row of :data:`COLOURINGS` (its name, whether its
values are categories or numbers, what it needs, and the function that gives each point's
value), looked up by ``--color``'s name.

- ``class``: the image's class folder, as torchvision's ``ImageFolder`` reads a folder
  (``FOLDER/CLASS/.../image.jpg``: the first folder under the input folder);
- ``pred``: the model's prediction for the image (model B's for B's points with --against);
- ``unit``: unit K of each point's vector (in model A's space), where a channel lives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from actviz.atlas.options import Colour
from actviz.errors import UsageError
from actviz.render.palette import colormap_lut
from actviz.render.segmentation import class_palette

__all__ = [
    "COLOURINGS",
    "Colouring",
    "Coloured",
    "PointFacts",
    "choose",
    "colour_points",
    "folder_class",
]

U8 = npt.NDArray[np.uint8]
#: Categories named in the legend at most (the rest are "other").
LEGEND = 20
#: Colour of points without a value (an image outside every class folder).
NONE_RGB = (128, 128, 128)


def folder_class(rel: PurePosixPath) -> str | None:
    """The class of an image found in a folder: its first folder under that folder."""
    return rel.parts[0] if len(rel.parts) > 1 else None


@dataclass(frozen=True)
class PointFacts:
    """What a colouring may read about each point.

    Attributes:
        image: ``(N,)`` each point's image.
        side: ``(N,)`` 0 for model A's points, 1 for model B's.
        classes: Each image's class folder (None outside one).
        predictions: Per side, each image's predicted class (-1: none).
        categories: The model's class names, when it has them.
        vectors: ``(N, C)`` the points in model A's space.
        classifier: Whether the model gives class scores.
    """

    image: npt.NDArray[np.int32]
    side: npt.NDArray[np.int8]
    classes: Sequence[str | None]
    predictions: Sequence[npt.NDArray[np.int64]]
    categories: Sequence[str] | None
    vectors: npt.NDArray[np.float32]
    classifier: bool


@dataclass(frozen=True)
class Coloured:
    """The points' colours and what they mean.

    Attributes:
        name: The colouring (``class``, ``pred``, ``unit:17``; ``none``).
        kind: ``categorical`` or ``continuous``.
        values: ``(N,)`` a category index (-1: none) or a number per point.
        names: The categories, most frequent first.
        rgb: ``(N, 3)`` each point's colour.
        low: The numbers' colour range (continuous).
        high: Its top.
    """

    name: str
    kind: Literal["categorical", "continuous"]
    values: npt.NDArray[Any]
    names: list[str]
    rgb: U8
    low: float = 0.0
    high: float = 0.0

    def legend(self) -> list[tuple[tuple[int, int, int], str]]:
        """``(rgb, label)`` of the most frequent categories (for a continuous colouring, the
        range's ends)."""
        if self.kind == "continuous":
            lut = _lut()
            return [(_rgb(lut[0]), f"{self.low:.3g}"), (_rgb(lut[-1]), f"{self.high:.3g}")]
        palette = _palette()
        return [
            (_rgb(palette[i % len(palette)]), name) for i, name in enumerate(self.names[:LEGEND])
        ]

    def cell_summary(self, members: npt.NDArray[np.int64]) -> dict[str, Any]:
        """What a cell's points say: the commonest category and its share, or the mean."""
        values = self.values[members]
        if self.kind == "continuous":
            mean = float(np.mean(values)) if len(values) else 0.0
            return {
                "mean": mean,
                "rgb": _continuous_rgb(np.asarray([mean]), self.low, self.high)[0].tolist(),
            }
        known = values[values >= 0]
        if not len(known):
            return {"label": None, "share": 0.0, "rgb": list(NONE_RGB)}
        counts = np.bincount(known)
        top = int(np.argmax(counts))
        palette = _palette()
        return {
            "label": self.names[top],
            "share": float(counts[top] / len(values)),
            "rgb": palette[top % len(palette)].tolist(),
        }


@dataclass(frozen=True)
class Colouring:
    """One way to colour points.

    Attributes:
        name: ``--color``'s word.
        kind: ``categorical`` or ``continuous``.
        refuse: Why it cannot colour these points (None when it can).
        values: The points' values: category names per point (categorical) or numbers.
    """

    name: str
    kind: Literal["categorical", "continuous"]
    refuse: Callable[[PointFacts, Colour], str | None]
    values: Callable[[PointFacts, Colour], Any]


def _class_refusal(facts: PointFacts, colour: Colour) -> str | None:
    if any(c is not None for c in facts.classes):
        return None
    return (
        "--color class colours each image by its class folder, and these images sit in no "
        "class folder (FOLDER/CLASS/image.jpg); use --color pred or unit:K"
    )


def _class_values(facts: PointFacts, colour: Colour) -> list[str | None]:
    return [facts.classes[i] for i in facts.image]


def _pred_refusal(facts: PointFacts, colour: Colour) -> str | None:
    if facts.classifier:
        return None
    return "--color pred needs a classifier's predictions; use --color class or unit:K"


def _pred_values(facts: PointFacts, colour: Colour) -> list[str | None]:
    names = list(facts.categories or [])
    labels: list[str | None] = []
    for image, side in zip(facts.image, facts.side, strict=True):
        index = int(facts.predictions[int(side)][int(image)])
        labels.append(
            None if index < 0 else names[index] if index < len(names) else f"class {index}"
        )
    return labels


def _unit_refusal(facts: PointFacts, colour: Colour) -> str | None:
    channels = facts.vectors.shape[1]
    if colour.unit is not None and colour.unit < channels:
        return None
    return f"--color unit:{colour.unit}: the layer has {channels} units (0-{channels - 1})"


def _unit_values(facts: PointFacts, colour: Colour) -> npt.NDArray[np.float32]:
    assert colour.unit is not None
    return np.asarray(facts.vectors[:, colour.unit], np.float32)


COLOURINGS: dict[str, Colouring] = {
    row.name: row
    for row in (
        Colouring("class", "categorical", _class_refusal, _class_values),
        Colouring("pred", "categorical", _pred_refusal, _pred_values),
        Colouring("unit", "continuous", _unit_refusal, _unit_values),
    )
}


def choose(colour: Colour | None, facts: PointFacts) -> Colour | None:
    """``--color`` as given, or: the class folders when there are two or more, else the
    prediction of a classifier, else None (one colour)."""
    if colour is not None:
        return colour
    if len({c for c in facts.classes if c is not None}) >= 2:
        return Colour("class")
    return Colour("pred") if facts.classifier else None


def colour_points(colour: Colour | None, facts: PointFacts) -> Coloured:
    """Every point's colour.

    Raises:
        UsageError: When the colouring cannot apply (its refusal, in one line).
    """
    count = len(facts.image)
    if colour is None:
        rgb = np.empty((count, 3), np.uint8)
        rgb[:] = _palette()[0]
        return Coloured("none", "categorical", np.zeros(count, np.int64), ["point"], rgb)
    row = COLOURINGS[colour.kind]
    why = row.refuse(facts, colour)
    if why is not None:
        raise UsageError(why)
    values = row.values(facts, colour)
    if row.kind == "continuous":
        numbers = np.asarray(values, np.float32)
        low, high = (
            (float(np.percentile(numbers, 1)), float(np.percentile(numbers, 99)))
            if count
            else (0.0, 0.0)
        )
        return Coloured(
            str(colour), "continuous", numbers, [], _continuous_rgb(numbers, low, high), low, high
        )
    labels = list(values)
    frequency: dict[str, int] = {}
    for label in labels:
        if label is not None:
            frequency[label] = frequency.get(label, 0) + 1
    names = sorted(frequency, key=lambda n: (-frequency[n], n))
    index = {name: i for i, name in enumerate(names)}
    codes = np.asarray([index[x] if x is not None else -1 for x in labels], np.int64)
    palette = _palette()
    rgb = palette[np.maximum(codes, 0) % len(palette)].copy()
    rgb[codes < 0] = NONE_RGB
    return Coloured(str(colour), "categorical", codes, names, rgb)


def _rgb(row: U8) -> tuple[int, int, int]:
    return int(row[0]), int(row[1]), int(row[2])


def _palette() -> U8:

    return class_palette()


def _lut() -> U8:

    return colormap_lut("viridis", 256)


def _continuous_rgb(values: npt.NDArray[Any], low: float, high: float) -> U8:
    span = high - low if high > low else 1.0
    level = np.clip((np.asarray(values, np.float64) - low) / span, 0, 1)
    rgb: U8 = _lut()[np.rint(level * 255).astype(np.int64)]
    return rgb
