"""The chart of ``actviz tcav``: per concept and class, every run's TCAV score beside every
random vector's, their means, and whether the difference is significant. PNG bytes from
matplotlib's Agg canvas (no pyplot state)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["tcav_chart"]


def tcav_chart(
    rows: Sequence[Mapping[str, Any]], *, title: str, random: bool, width: int = 900
) -> bytes:
    """The chart from the score rows of ``tcav.json``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = 140 + 46 * max(1, len(rows))
    fig = Figure(figsize=(width / 100, height / 100), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    labels = []
    for y, row in enumerate(rows):
        for values, offset, colour in (
            (row.get("scores") or [], -0.17, "#d84315"),
            (row.get("random_scores") or [], 0.17, "#757575"),
        ):
            data = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
            jitter = rng.uniform(-0.08, 0.08, size=data.size)
            ax.scatter(data, y + offset + jitter, s=14, color=colour, alpha=0.7, lw=0)
            if data.size and np.isfinite(data).any():
                ax.plot(
                    [np.nanmean(data)] * 2,
                    [y + offset - 0.13, y + offset + 0.13],
                    color=colour,
                    lw=2.5,
                )
        target = row.get("target_name") or f"class {row.get('target')}"
        mark = " *" if row.get("significant") else ""
        labels.append(f"{row['concept']} -> {target}{mark}\np = {_p(row.get('p'))}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(-0.6, max(1, len(rows)) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(-0.02, 1.02)
    ax.axvline(0.5, color="#bdbdbd", lw=1, ls="--")
    ax.set_xlabel(
        "TCAV score of each run (red: the concept's vectors; grey: random vectors'), bars: the "
        "means; * significant",
        fontsize=8,
    )
    ax.grid(True, axis="x", alpha=0.3)
    heading = title + (
        "\nrandom weights: these scores describe an untrained model" if random else ""
    )
    fig.suptitle(heading, fontsize=10, color="#b71c1c" if random else "black")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _p(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.2g}" if v < 0.01 else f"{v:.3f}"
