"""A run's measuring pass for ``--norm shared``: one value range per layer over every image,
and with a sort, the channels every image's grid shows."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actviz.command.forward import BatchForward
from actviz.layouts import to_drawable

__all__ = ["SharedScales", "shared_ranges"]


@dataclass(frozen=True)
class SharedScales:
    """What a run's measuring pass decides once for every image (``--norm shared``).

    Attributes:
        ranges: Capture key -> the value range over every image.
        channels: Capture key -> the channels every image's grid shows, in display order,
            ranked by the sort statistic over every image (only with a sort other than
            ``index``).
        images: How many images were measured.
        order: The sort statistic the channels were ranked by.
    """

    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    channels: dict[str, tuple[int, ...]] = field(default_factory=dict)
    images: int = 0
    order: str = "index"


def shared_ranges(
    forward: BatchForward,
    paths: Sequence[Path],
    recorder: Any,
    clip: tuple[float, float] | None,
    *,
    order: str = "index",
    max_channels: int = 0,
    contexts: Mapping[str, Any] | None = None,
    layout: Any = "auto",
) -> SharedScales:
    """Per capture key, the value range over every image (clipped per image when asked) and,
    with a sort other than ``index``, the channels to show ranked over every image.

    The ranking aggregates each channel's statistic over all images: the largest maximum,
    the mean of all values, or the standard deviation of all values (finite values only),
    computed on the maps as the grids draw them. ``max_channels`` of 0 keeps them all.
    """
    import torch

    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    tallies: dict[str, _ChannelTally] = {}
    images = 0
    with contextlib.ExitStack() as stack:
        for _good, _logits, _x in forward.batches(paths, stack):
            images += len(_good)
            for cap in recorder.captures:
                batch = recorder[cap.key]
                if order != "index":
                    ctx = (contexts or {}).get(cap.module)
                    for sample in batch:
                        tallies.setdefault(cap.key, _ChannelTally()).add(sample, ctx, layout)
                flat = batch.reshape(len(_good), -1)
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
    channels = {
        key: ranked
        for key, tally in tallies.items()
        if (ranked := tally.ranked(order, max_channels))
    }
    return SharedScales(
        ranges={key: (lows[key], highs[key]) for key in lows},
        channels=channels,
        images=images,
        order=order,
    )


class _ChannelTally:
    """Per-channel count, sum, sum of squares and maximum of finite values, over images."""

    def __init__(self) -> None:
        self.count: Any = None
        self.total: Any = None
        self.squares: Any = None
        self.peak: Any = None
        self.shape: tuple[int, ...] | None = None

    def add(self, sample: Any, ctx: Any, layout: Any) -> None:
        """Add one image's output, laid out as the grids draw it (maps only)."""

        drawable = to_drawable(sample.numpy(), ctx, layout=layout)
        if drawable.kind != "maps" or drawable.array is None:
            return
        maps = drawable.array.reshape(drawable.array.shape[0], -1)
        if self.shape is not None and maps.shape[0] != self.shape[0]:
            return  # the channel count changed between images: keep the first's ranking
        finite = np.isfinite(maps)
        values = np.where(finite, maps, 0.0).astype(np.float64)
        count = finite.sum(axis=1)
        total = values.sum(axis=1)
        squares = np.square(values).sum(axis=1)
        peak = np.where(finite, maps, -np.inf).max(axis=1).astype(np.float64)
        if self.shape is None:
            self.shape = maps.shape
            self.count, self.total, self.squares, self.peak = count, total, squares, peak
        else:
            self.count = self.count + count
            self.total = self.total + total
            self.squares = self.squares + squares
            self.peak = np.maximum(self.peak, peak)

    def ranked(self, order: str, limit: int) -> tuple[int, ...]:
        """Channels by descending statistic (ties in index order); no finite value last."""

        if self.shape is None:
            return ()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.total / np.maximum(self.count, 1)
            if order == "max":
                score = self.peak
            elif order == "mean":
                score = mean
            else:
                variance = self.squares / np.maximum(self.count, 1) - np.square(mean)
                score = np.sqrt(np.maximum(variance, 0.0))
        score = np.where((self.count > 0) & ~np.isnan(score), score, -np.inf)
        ids = np.argsort(-score, kind="stable")
        return tuple(int(i) for i in (ids if limit <= 0 else ids[:limit]))
