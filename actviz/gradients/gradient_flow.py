"""The gradient-flow chart: gradient norm against depth, on a log scale.

One line per image (or per any other series), with bands where gradients vanish or explode, so
a glance shows where the signal dies on its way from the output back to the input; and the
axes every chart against depth is drawn on (:func:`depth_axes`, :func:`depth_png`).
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["EXPLODING", "VANISHING", "depth_axes", "depth_png", "gradient_flow_png"]

VANISHING = 1e-7
"""Gradient norms below this are marked as vanishing in the gradient-flow chart."""
EXPLODING = 1e3
"""Gradient norms above this are marked as exploding in the gradient-flow chart."""


def gradient_flow_png(
    layers: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    show_mean: bool = True,
    size: tuple[int, int] = (1000, 450),
    mean: tuple[Sequence[float], int] | None = None,
) -> bytes:
    """Chart of gradient norm against depth, as PNG: one line per series, log scale.

    Norms below :data:`VANISHING` and above :data:`EXPLODING` fall in shaded bands; zeros,
    which a log scale cannot show, are marked with triangles on the bottom edge.

    Args:
        layers: Layer names in depth order (the x axis).
        series: Label (e.g. an image name) -> one norm per layer.
        title: The chart's title.
        show_mean: With several series, also draw their geometric mean in black.
        mean: The geometric mean to draw instead, and how many images it is over: a folder
            run draws a sample of its images and the mean of them all.
        size: ``(width, height)`` in pixels.

    Raises:
        ValueError: If there are no layers or series, or a series has the wrong length.
    """
    from matplotlib.ticker import LogFormatterSciNotation

    if not layers or not series:
        raise ValueError("need at least one layer and one series")
    fig, ax, depth = depth_axes(layers, series, size, "norms")
    data = np.array([list(v) for v in series.values()], dtype=np.float64)
    shown = np.where(np.isfinite(data) & (data > 0), data, np.nan)
    positive = shown[np.isfinite(shown)]
    lo = float(positive.min()) / 4 if positive.size else VANISHING / 10
    hi = float(positive.max()) * 4 if positive.size else 1.0
    if hi / lo < 100:  # keep at least two decades so a flat profile does not look steep
        mid = math.sqrt(lo * hi)
        lo, hi = mid / 10, mid * 10
    many = len(series) > 10
    for label, row in zip(series, shown, strict=True):
        ax.plot(
            depth,
            row,
            marker="" if many or len(layers) > 60 else ".",
            linewidth=0.8 if many else 1.4,
            alpha=0.35 if many else 0.9,
            color="0.55" if many else None,
            label=None if many else label,
        )
    if mean is not None:
        line, over = np.asarray(mean[0], dtype=np.float64), mean[1]
    elif show_mean and len(series) > 1:
        with warnings.catch_warnings():  # a layer where every norm is zero has no mean
            warnings.simplefilter("ignore", RuntimeWarning)
            line, over = np.exp(np.nanmean(np.log(shown), axis=0)), len(series)
    if mean is not None or (show_mean and len(series) > 1):
        ax.plot(
            depth,
            line,
            color="black",
            linewidth=2.4,
            label=f"geometric mean ({over}, of nonzero norms)",
        )
    zero_cols = np.nonzero(((data == 0) | ~np.isfinite(data)).any(axis=0))[0]
    if zero_cols.size:
        ax.scatter(
            zero_cols,
            [lo * 1.3] * zero_cols.size,
            marker="v",
            color="crimson",
            zorder=3,
            label="zero or non-finite",
        )
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    if hi / lo < 1e3:  # few decades: label the 2x and 5x ticks too, or the axis is bare
        ax.yaxis.set_minor_formatter(
            LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(3, 1))
        )
    ax.axhspan(min(lo, VANISHING), VANISHING, color="tab:blue", alpha=0.12, linewidth=0)
    ax.axhspan(EXPLODING, max(hi, EXPLODING), color="tab:red", alpha=0.12, linewidth=0)
    for level, colour, text in (
        (VANISHING, "tab:blue", f"vanishing < {VANISHING:g}"),
        (EXPLODING, "tab:red", f"exploding > {EXPLODING:g}"),
    ):
        if lo < level < hi:
            ax.axhline(level, color=colour, linestyle="--", linewidth=1)
            ax.text(
                0.005,
                level,
                f" {text}",
                color=colour,
                va="bottom",
                fontsize=8,
                transform=ax.get_yaxis_transform(),
            )
    ax.grid(True, which="major", axis="y", alpha=0.3)
    if not many or show_mean:
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, loc="best", ncol=2 if len(handles) > 6 else 1)
    return depth_png(fig, ax, layers, ylabel="gradient L2 norm", title=title)


def depth_axes(
    layers: Sequence[str], series: Mapping[str, Sequence[Any]], size: tuple[int, int], unit: str
) -> tuple[Any, Any, Any]:
    """A chart against depth (one value per layer in each of ``series``): its figure, axes and
    x positions, on matplotlib's Agg canvas directly (no pyplot state, no GUI backend).

    Raises:
        ValueError: If a series has the wrong length (``unit``: what its values are).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    for label, values in series.items():
        if len(values) != len(layers):
            raise ValueError(f"series {label!r} has {len(values)} {unit} for {len(layers)} layers")
    fig = Figure(figsize=(size[0] / 100, size[1] / 100), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(), np.arange(len(layers))


def depth_png(fig: Any, ax: Any, layers: Sequence[str], *, ylabel: str, title: str) -> bytes:
    """A chart of :func:`depth_axes` finished (the layer names along x, the labels) as PNG."""
    step = max(1, math.ceil(len(layers) / 40))  # about 40 names fit across 1000 px
    ticks = list(range(0, len(layers), step))
    ax.set_xticks(ticks, [layers[i] for i in ticks], rotation=60, ha="right", fontsize=7)
    ax.set_xlim(-0.5, len(layers) - 0.5)
    ax.set_xlabel("layer (input side left, output side right)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
