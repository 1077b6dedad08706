"""The curves chart of cam-eval: the mean deletion and insertion curves of every method beside
the baselines', one panel each, as PNG bytes (matplotlib's Agg canvas, no pyplot state)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["curves_png"]

_BASELINE_STYLE = {"random": "#9e9e9e", "gaussian": "#8a5300", "sobel": "#6a1b9a"}


def curves_png(
    summary: Mapping[str, Mapping[str, Any]],
    titles: Mapping[str, str],
    *,
    fractions: Sequence[float],
    title: str,
    size: tuple[int, int] = (1100, 440),
) -> bytes:
    """Mean curves against the fraction of pixels deleted (left) or inserted (right): methods
    as solid lines, baselines dashed; each label carries the mean area under its curve.

    Args:
        summary: Per map name, ``curves`` (``deletion``/``insertion`` mean curves) and
            ``metrics`` (``deletion_auc``/``insertion_auc`` means), as
            :func:`actviz.cam_eval.summary.summarize` gives them.
        titles: Map name -> its label (``Grad-CAM``).
        fractions: The x of each point.
        title: The chart's title (says "random weights" when they are).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] / 100, size[1] / 100), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, kind, better in zip(
        axes, ("deletion", "insertion"), ("lower is better", "higher is better"), strict=True
    ):
        for name, entry in summary.items():
            curve = (entry.get("curves") or {}).get(kind)
            if not curve:
                continue
            area = ((entry.get("metrics") or {}).get(f"{kind}_auc") or {}).get("mean")
            label = f"{titles.get(name, name)} (AUC {area:.3f})" if area is not None else name
            if entry.get("baseline"):
                ax.plot(
                    fractions,
                    curve,
                    linestyle="--",
                    linewidth=1.3,
                    label=label,
                    color=_BASELINE_STYLE.get(name),
                )
            else:
                ax.plot(fractions, curve, linewidth=2.0, label=label)
        verb = "deleted (set to 0)" if kind == "deletion" else "inserted into the blurred image"
        ax.set_title(f"{kind}: {better}", fontsize=10)
        ax.set_xlabel(f"fraction of pixels {verb}, most salient first")
        ax.set_xlim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[0].set_ylabel("probability of the target class (mean over images)")
    fig.suptitle(title, fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
