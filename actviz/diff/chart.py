"""The similarity chart: CKA and cosine similarity against depth, the threshold, and the first
divergent layer marked (a chart of :func:`actviz.gradients.gradient_flow.depth_axes`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from actviz.gradients.gradient_flow import depth_axes, depth_png

__all__ = ["similarity_png"]


def similarity_png(
    layers: Sequence[str],
    series: dict[str, Sequence[float | None]],
    *,
    threshold: float,
    metric: str,
    first_divergent: str | None,
    title: str,
    size: tuple[int, int] = (1000, 460),
) -> bytes:
    """Similarity against depth: one line per series (``cka``, ``cosine``), the threshold of
    ``metric`` as a dashed line, and the first divergent layer as a red band and label; PNG.

    Args:
        layers: Layer names in depth order (the x axis).
        series: Name -> one value per layer (None where it is not defined).
        threshold: Where ``metric`` counts as divergent.
        metric: The series the threshold applies to.
        first_divergent: The layer to mark, or None.
        title: The chart's title.
        size: ``(width, height)`` in pixels.

    Raises:
        ValueError: If there are no layers, or a series has the wrong length.
    """

    if not layers:
        raise ValueError("need at least one layer")
    fig, ax, depth = depth_axes(layers, series, size, "values")
    styles = {
        "cka": ("linear CKA", "#0a58ca", "o"),
        "cosine": ("mean cosine similarity", "#2e7d32", "s"),
    }
    finite: list[float] = [threshold]
    for name, values in series.items():
        data = np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)
        if not np.isfinite(data).any():
            continue
        finite.extend(float(v) for v in data[np.isfinite(data)])
        label, colour, marker = styles.get(name, (name, None, "."))
        bold = name == metric
        ax.plot(
            depth,
            data,
            color=colour,
            marker=marker if len(layers) <= 60 else "",
            markersize=4,
            linewidth=2.0 if bold else 1.2,
            label=f"{label}{' (thresholded)' if bold else ''}",
        )
    low = min(finite)
    # Room below the lowest value for the first divergent layer's label.
    bottom = max(-1.05, low - 0.12 * max(1.0 - low, 0.05))
    ax.set_ylim(bottom, 1.0 + max(0.005, (1.0 - bottom) * 0.04))
    ax.axhline(threshold, color="#b3261e", linestyle="--", linewidth=1)
    ax.text(
        0.005,
        threshold,
        f" threshold: {metric} {threshold:g}",
        color="#b3261e",
        va="bottom",
        fontsize=8,
        transform=ax.get_yaxis_transform(),
    )
    if first_divergent is not None and first_divergent in layers:
        where = list(layers).index(first_divergent)
        ax.axvspan(where - 0.5, where + 0.5, color="#b3261e", alpha=0.15, linewidth=0)
        ax.annotate(
            f"first divergent: {first_divergent}",
            xy=(where, bottom),
            xytext=(4, 6),
            textcoords="offset points",
            color="#b3261e",
            fontsize=9,
            fontweight="bold",
            ha="left" if where < len(layers) * 0.6 else "right",
        )
    ax.grid(True, axis="y", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8, loc="best")
    return depth_png(fig, ax, layers, ylabel="similarity of B to A", title=title)
