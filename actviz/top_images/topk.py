"""The running top-k per channel: pure numpy, mergeable, and independent of how images were split.

A batch (on this machine or on a remote worker) becomes :class:`Candidates`: per layer, the
batch's best ``k`` images of every channel with their scores, argmax locations, predicted
classes and heat-map windows, plus the batch's share of the channel health figures. That is
small (no pixels, no whole activations) and picklable. :class:`TopK` merges candidates, or
another ``TopK``, into the best ``k`` so far.

Why the result cannot depend on batch size, order or workers:

- Entries are ordered by one total order: valid before padding, finite scores before NaN,
  higher score first, then path ascending. Paths are unique within a run, so the best ``k``
  of a union is the same whichever way the union was split and in whichever order merged.
- Counts and maxima merge exactly. Sums of scores are kept as exact integers in units of
  2**-149 (every float32 is an integer multiple of that), so the mean score is the correctly
  rounded mean of the exact sum, whatever the grouping; float addition would not be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ARRAY_FIELDS", "Candidates", "LayerTop", "TopK", "layer_candidates"]

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Strings = npt.NDArray[np.str_]

#: The array fields of :class:`LayerTop`, as a checkpoint stores them.
ARRAY_FIELDS = (
    "scores",
    "paths",
    "ys",
    "xs",
    "classes",
    "heat",
    "origin",
    "valid",
    "active",
    "nonfinite",
    "best",
)

#: Scores are summed exactly as integers in units of 2**-EXACT_BITS.
EXACT_BITS = 149
_SCALE = 2.0**EXACT_BITS


@dataclass(frozen=True, eq=False)
class LayerTop:
    """One layer's best entries per channel so far, and its channel health figures.

    Entry arrays have one row per channel and one column per entry slot, best first; slots
    beyond the entries found so far are padding (``valid`` False).

    Attributes:
        scores: ``(C, m)`` float32 score of each entry.
        paths: ``(C, m)`` the image of each entry (its path as text).
        ys: ``(C, m)`` int32 row of the channel's maximum in the layer's map grid.
        xs: ``(C, m)`` int32 column of it.
        classes: ``(C, m)`` int32 top-1 class the model predicted for the image (-1: none).
        heat: ``(C, m, wh, ww)`` float32 window of the channel's map around the maximum
            (the cells that cover its receptive field), for the heat map over the crop.
        origin: ``(C, m, 2)`` int32 map row and column of the window's top-left cell.
        valid: ``(C, m)`` which slots hold an entry.
        images: Images scored.
        active: ``(C,)`` int64: images where the channel is above zero somewhere.
        nonfinite: ``(C,)`` int64: images whose score is NaN or infinite.
        best: ``(C,)`` float32: the highest finite score (-inf when none).
        sums: Per channel, the exact sum of the finite scores in units of 2**-149.
    """

    scores: F32
    paths: Strings
    ys: I32
    xs: I32
    classes: I32
    heat: F32
    origin: I32
    valid: Bools
    images: int
    active: I64
    nonfinite: I64
    best: F32
    sums: tuple[int, ...]

    @property
    def channels(self) -> int:
        """Number of channels."""
        return int(self.scores.shape[0])

    @property
    def window(self) -> tuple[int, int]:
        """``(rows, columns)`` of the heat-map windows."""
        return int(self.heat.shape[2]), int(self.heat.shape[3])

    def mean(self, channel: int) -> float | None:
        """The mean score of a channel over the images with a finite score."""
        finite = self.images - int(self.nonfinite[channel])
        if finite <= 0:
            return None

        return float(Fraction(self.sums[channel], finite) / (1 << EXACT_BITS))

    def merged(self, other: LayerTop, k: int) -> LayerTop:
        """The best ``k`` entries of both, and both health figures combined."""
        if other.channels != self.channels or other.window != self.window:
            raise ValueError(
                f"cannot merge a layer of {other.channels} channels and windows {other.window} "
                f"into one of {self.channels} and {self.window}"
            )
        joined = {
            name: np.concatenate([getattr(self, name), getattr(other, name)], axis=1)
            for name in ("scores", "paths", "ys", "xs", "classes", "heat", "origin", "valid")
        }
        return _best(
            joined,
            k,
            images=self.images + other.images,
            active=self.active + other.active,
            nonfinite=self.nonfinite + other.nonfinite,
            best=np.maximum(self.best, other.best),
            sums=tuple(a + b for a, b in zip(self.sums, other.sums, strict=True)),
        )

    def entries(self, channel: int) -> list[dict[str, Any]]:
        """A channel's entries, best first: ``{path, score, y, x, class}``."""
        row = self.valid[channel]
        return [
            {
                "path": str(self.paths[channel, j]),
                "score": float(self.scores[channel, j]),
                "y": int(self.ys[channel, j]),
                "x": int(self.xs[channel, j]),
                "class": int(self.classes[channel, j]),
            }
            for j in range(int(row.sum()))
        ]

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The arrays, by field name (for a checkpoint file)."""
        return {name: getattr(self, name) for name in ARRAY_FIELDS}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, npt.NDArray[Any]], images: int, sums: Sequence[int]
    ) -> LayerTop:
        """The inverse of :meth:`arrays`."""
        return cls(
            scores=np.asarray(arrays["scores"], np.float32),
            paths=np.asarray(arrays["paths"], np.str_),
            ys=np.asarray(arrays["ys"], np.int32),
            xs=np.asarray(arrays["xs"], np.int32),
            classes=np.asarray(arrays["classes"], np.int32),
            heat=np.asarray(arrays["heat"], np.float32),
            origin=np.asarray(arrays["origin"], np.int32),
            valid=np.asarray(arrays["valid"], np.bool_),
            images=int(images),
            active=np.asarray(arrays["active"], np.int64),
            nonfinite=np.asarray(arrays["nonfinite"], np.int64),
            best=np.asarray(arrays["best"], np.float32),
            sums=tuple(int(s) for s in sums),
        )


def _best(
    entries: dict[str, npt.NDArray[Any]],
    k: int,
    *,
    images: int,
    active: I64,
    nonfinite: I64,
    best: F32,
    sums: tuple[int, ...],
) -> LayerTop:
    """Keep the best ``k`` entries of each row under the total order of the module doc."""
    scores = entries["scores"]
    nan = np.isnan(scores)
    # lexsort: the last key is the primary one. Padding last, then NaN, then by descending
    # score, ties by path ascending. -score of padding and NaN slots is zeroed: they sort by
    # the flags, and -NaN must never reach the comparison.
    order = np.lexsort(
        (
            entries["paths"],
            np.where(nan | ~entries["valid"], 0.0, -scores.astype(np.float64)),
            nan,
            ~entries["valid"],
        ),
        axis=-1,
    )[:, :k]
    kept = {}
    for name, array in entries.items():
        index = order.reshape(order.shape + (1,) * (array.ndim - 2))
        kept[name] = np.take_along_axis(array, index, axis=1)
    return LayerTop(
        scores=kept["scores"],
        paths=kept["paths"],
        ys=kept["ys"],
        xs=kept["xs"],
        classes=kept["classes"],
        heat=kept["heat"],
        origin=kept["origin"],
        valid=kept["valid"],
        images=images,
        active=active,
        nonfinite=nonfinite,
        best=best,
        sums=sums,
    )


def layer_candidates(
    paths: Sequence[str],
    scores: npt.ArrayLike,
    active: npt.ArrayLike,
    ys: npt.ArrayLike,
    xs: npt.ArrayLike,
    heat: npt.ArrayLike,
    origin: npt.ArrayLike,
    classes: npt.ArrayLike,
    k: int,
) -> LayerTop:
    """One layer's candidates from one batch of ``n`` images: every channel's best
    ``min(k, n)`` images of the batch, and the batch's health figures.

    Args:
        paths: The ``n`` images' paths.
        scores: ``(n, C)`` each image's score per channel.
        active: ``(n, C)`` whether the channel is above zero anywhere in the image.
        ys: ``(n, C)`` row of each channel's maximum in the map grid.
        xs: ``(n, C)`` column of it.
        heat: ``(n, C, wh, ww)`` the map window around each maximum.
        origin: ``(n, C, 2)`` the window's top-left cell.
        classes: ``(n,)`` each image's predicted top-1 class (-1 for none).
        k: Entries kept per channel.
    """
    score = np.asarray(scores, np.float32)
    n, channels = score.shape
    finite = np.isfinite(score)
    # Exact: a float32 times 2**149 is an integer, and float64 holds it exactly.
    scaled = np.where(finite, score, 0).astype(np.float64) * _SCALE
    sums = tuple(sum(map(int, column)) for column in scaled.T.tolist())
    window = np.asarray(heat, np.float32)
    entries = {
        "scores": score.T,
        "paths": np.broadcast_to(np.asarray(list(paths), np.str_), (channels, n)),
        "ys": np.asarray(ys, np.int32).T,
        "xs": np.asarray(xs, np.int32).T,
        "classes": np.broadcast_to(np.asarray(classes, np.int32), (channels, n)),
        "heat": window.transpose(1, 0, 2, 3),
        "origin": np.asarray(origin, np.int32).transpose(1, 0, 2),
        "valid": np.ones((channels, n), np.bool_),
    }
    return _best(
        entries,
        k,
        images=n,
        active=np.asarray(active, np.bool_).sum(axis=0).astype(np.int64),
        nonfinite=(~finite).sum(axis=0).astype(np.int64),
        best=np.where(finite, score, -np.inf).max(axis=0).astype(np.float32),
        sums=sums,
    )


@dataclass(frozen=True, eq=False)
class Candidates:
    """What one batch contributes: per capture key, its :class:`LayerTop` (at most ``k``
    entries per channel), and which images it covered. Small and picklable, so a remote
    worker can send it to the driver.

    Attributes:
        layers: Capture key -> the batch's candidates for that layer.
        paths: The images the batch scored.
    """

    layers: Mapping[str, LayerTop]
    paths: tuple[str, ...] = ()


@dataclass
class TopK:
    """The best ``k`` images per channel of every layer so far; merge candidates into it.

    ``update`` and ``merge`` give the same result whatever the order and grouping of what is
    merged (see the module doc). Each replaces ``layers`` by one assignment, so an
    interruption leaves either the state before or the state after, never half of it.

    Attributes:
        k: Entries kept per channel.
        layers: Capture key -> that layer's best entries and health figures.
    """

    k: int
    layers: dict[str, LayerTop] = field(default_factory=dict)

    def update(self, candidates: Candidates) -> None:
        """Merge one batch's candidates."""
        self.layers = self._merged(candidates.layers)

    def merge(self, other: TopK) -> None:
        """Merge another accumulator (another worker's share of the images)."""
        self.layers = self._merged(other.layers)

    def updated(self, candidates: Candidates) -> TopK:
        """A new accumulator with ``candidates`` merged; this one is left as it is."""
        return TopK(self.k, self._merged(candidates.layers))

    def _merged(self, layers: Mapping[str, LayerTop]) -> dict[str, LayerTop]:
        merged = dict(self.layers)
        for key, top in layers.items():
            mine = merged.get(key)
            merged[key] = (
                top.merged(_empty_like(top), self.k) if mine is None else mine.merged(top, self.k)
            )
        return merged

    def paths(self) -> set[str]:
        """Every image that is in some channel's top ``k`` of some layer."""
        found: set[str] = set()
        for top in self.layers.values():
            found.update(np.unique(top.paths[top.valid]).tolist())
        return found

    @property
    def images(self) -> int:
        """Images scored (the most any layer saw)."""
        return max((top.images for top in self.layers.values()), default=0)


def _empty_like(top: LayerTop) -> LayerTop:
    channels = top.channels
    wh, ww = top.window
    return LayerTop(
        scores=np.zeros((channels, 0), np.float32),
        paths=np.zeros((channels, 0), np.str_),
        ys=np.zeros((channels, 0), np.int32),
        xs=np.zeros((channels, 0), np.int32),
        classes=np.zeros((channels, 0), np.int32),
        heat=np.zeros((channels, 0, wh, ww), np.float32),
        origin=np.zeros((channels, 0, 2), np.int32),
        valid=np.zeros((channels, 0), np.bool_),
        images=0,
        active=np.zeros(channels, np.int64),
        nonfinite=np.zeros(channels, np.int64),
        best=np.full(channels, -np.inf, np.float32),
        sums=(0,) * channels,
    )
