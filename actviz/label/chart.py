"""The chart of one layer's labels: per concept a row, every unit a dot at its score, the
labelled units coloured and the best few named, and where a unit unrelated to the concept
would score. PNG bytes from matplotlib's Agg canvas (no pyplot state)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MAX_ROWS", "label_chart"]

#: Concepts drawn, at most (people read about 32 concepts; Ramaswamy et al., CVPR 2023).
MAX_ROWS = 32
_NAMED = 3


def label_chart(
    layer: Mapping[str, Any],
    concepts: Sequence[Mapping[str, Any]],
    *,
    title: str,
    random: bool,
    width: int = 1000,
) -> bytes:
    """One layer's chart from its record in ``labels.json`` and the concepts' rows.

    Args:
        layer: The layer's record (``tables`` of every metric, ``records``, ``metric``).
        concepts: The concepts' rows (``concept``, ``tested``, ``chance``).
        title: The chart's title.
        random: The model's weights were random: said under the title.
        width: Width in pixels.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metric = str(layer["metric"])
    table = np.array(
        [[np.nan if v is None else v for v in row] for row in layer["tables"][metric]],
        dtype=np.float64,
    ).reshape(len(layer["records"]), -1)
    rows = [c for c, row in enumerate(concepts) if row.get("tested")][:MAX_ROWS]
    labelled = {
        (int(r["unit"]), str(entry["concept"]))
        for r in layer["records"]
        for entry in r.get("labels") or []
    }
    height = 90 + 34 * max(1, len(rows))
    fig = Figure(figsize=(width / 100, height / 100), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    for y, c in enumerate(rows):
        name = str(concepts[c]["concept"])
        values = table[:, c]
        jitter = rng.uniform(-0.18, 0.18, size=values.size)
        hit = np.array([(u, name) in labelled for u in range(values.size)], dtype=bool)
        ax.scatter(values[~hit], y + jitter[~hit], s=6, color="#9e9e9e", alpha=0.6, lw=0)
        ax.scatter(values[hit], y + jitter[hit], s=22, color="#d84315", lw=0)
        chance = concepts[c].get("chance")
        if chance is not None and metric != "iou":
            ax.plot([chance, chance], [y - 0.35, y + 0.35], color="#1565c0", lw=1.5)
        best = [u for u in np.argsort(-np.nan_to_num(values, nan=-np.inf)) if hit[u]][:_NAMED]
        for u in best:
            ax.annotate(
                f"{int(u)}",
                (values[u], y + jitter[u]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
                color="#bf360c",
            )
    ax.set_yticks(range(len(rows)), [str(concepts[c]["concept"]) for c in rows], fontsize=8)
    ax.set_ylim(-0.6, max(1, len(rows)) - 0.4)
    ax.invert_yaxis()
    title_of = {"auprc": "AUPRC", "f1": "F1", "pearson": "Pearson r", "auc": "AUC", "iou": "IoU"}
    ax.set_xlabel(
        f"{title_of.get(metric, metric)} of each unit (dot) for the concept; red: labelled "
        "(significant" + (" and IoU high enough" if metric == "iou" else "") + "), numbered: "
        "the best; blue tick: chance",
        fontsize=8,
    )
    ax.grid(True, axis="x", alpha=0.3)
    more = sum(1 for row in concepts if row.get("tested")) - len(rows)
    heading = title + (
        f" (first {len(rows)} concepts; {more} more in labels.json)" if more > 0 else ""
    )
    if random:
        heading += "\nrandom weights: these labels describe an untrained model"
    fig.suptitle(heading, fontsize=10, color="#b71c1c" if random else "black")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
