"""The depth chart of the report: how a network's activations change from layer to layer.

:class:`DepthChart` draws one picture of an image (or of a run's aggregate) from the layer rows
of ``stats.json``; which images get one is for :mod:`actviz.report.pages` to decide. matplotlib and
numpy are imported when a chart is made, not with this module: importing the report costs
nothing until it draws.
"""

from __future__ import annotations

import contextlib
import io
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DepthChart", "take_chart", "warm_up"]


class DepthChart:
    """One picture of a whole depth profile: mean, std and the 1-99 % band on a symlog axis
    above, zero, negative and dead-channel fractions below, flagged layers marked in red.

    One chart per image rather than one per layer: a layer's place is already shown in its
    section by a CSS marker and a highlighted table row. And one figure serves every chart of
    a report: only the data, the band and the flag marks change between images, so the axes,
    ticks and legends matplotlib spends most of its time building are made once (about 40
    rather than 120 ms a chart, which matters for hundreds of images).
    """

    def __init__(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter

        self.fig = Figure(figsize=(10, 4.2), dpi=100)
        FigureCanvasAgg(self.fig)  # the Agg canvas: no pyplot, no GUI backend, thread-safe
        top, bottom = self.fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
        self.top, self.bottom = top, bottom

        def line(ax: Any, label: str, color: str, width: float) -> Any:
            return ax.plot([], [], color=color, marker=".", lw=width, label=label)[0]

        self.lines = {
            "std": line(top, "std", "#0a58ca", 1.5),
            "mean": line(top, "mean", "#333333", 1.0),
            "zero_frac": line(bottom, "zeros", "#2e7d32", 1.2),
            "neg_frac": line(bottom, "negative", "#8a5300", 1.0),
            "dead_frac": line(bottom, "dead ch.", "#b3261e", 1.2),
        }
        top.plot([], [], color="#0a58ca", alpha=0.3, lw=6, label="1st-99th percentile")
        top.axhline(0.0, color="#9aa3ab", lw=0.8)
        bottom.set_ylim(-0.03, 1.03)
        bottom.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        for ax in (top, bottom):
            ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1), ncols=3, frameon=False)
            ax.grid(True, color="#e5e8eb", lw=0.6)
            ax.tick_params(labelsize=8)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
        # Figure-level text rather than an axes title and xlabel: those make matplotlib measure
        # every tick label of both axes again on each draw.
        self.title = self.fig.text(0.99, 0.975, "", ha="right", va="top", fontsize=9)
        self.title.set_color("#59636e")
        self.fig.text(0.5, 0.01, "layer (capture order, # in the tables)", ha="center", fontsize=9)
        self.fig.subplots_adjust(left=0.07, right=0.99, top=0.9, bottom=0.11, hspace=0.22)
        self.marks: list[Any] = []

    def render(
        self, layers: Sequence[Mapping[str, Any]], flags: Sequence[Mapping[str, Any]], title: str
    ) -> bytes:
        """The chart of one image (or of the run) as PNG bytes."""
        import numpy as np
        from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

        def column(key: str) -> Any:
            return np.array([np.nan if r.get(key) is None else float(r[key]) for r in layers])

        top, bottom = self.top, self.bottom
        for artist in self.marks:
            artist.remove()
        self.marks.clear()
        x = np.arange(len(layers))
        for key, line in self.lines.items():
            line.set_data(x, column(key))
        std = column("std")
        spread = std[np.isfinite(std) & (std > 0)]
        if spread.size:
            # Linear within a tenth of the typical spread, logarithmic beyond: means that hover
            # near 0 stay flat instead of swinging across decades, and an explosion still fits.
            linthresh = float(np.median(spread)) / 10
            top.set_yscale("symlog", linthresh=linthresh)
            # Plain labels (mathtext ones cost most of the drawing time), none at +-linthresh
            # where they would sit on top of each other; a line marks 0 instead.
            top.yaxis.set_major_formatter(FuncFormatter(_symlog_label(linthresh)))
        else:
            top.set_yscale("linear")
        top.relim()  # lines only: the band's limits are added as it is created
        self.marks.append(
            top.fill_between(x, column("p01"), column("p99"), color="#0a58ca", alpha=0.12, lw=0)
        )
        top.autoscale_view()
        bottom.set_xlim(-0.5 - 0.02 * len(layers), len(layers) - 0.5 + 0.02 * len(layers))
        # Every layer numbered while the labels fit (up to 40), evenly spaced ones beyond.
        bottom.xaxis.set_major_locator(
            MultipleLocator(1) if len(layers) <= 40 else MaxNLocator(integer=True, nbins=40)
        )
        positions = {str(r.get("name")): i for i, r in enumerate(layers)}
        marked: dict[int, list[str]] = {}
        for flag in flags:
            where = positions.get(str(flag.get("layer")))
            if where is not None:
                marked.setdefault(where, []).append(str(flag.get("kind")))
        for where, kinds in marked.items():
            for ax in (top, bottom):
                self.marks.append(ax.axvline(where, color="#b3261e", alpha=0.3, lw=2))
            self.marks.append(
                top.text(
                    where,
                    1.0,
                    ",".join(dict.fromkeys(kinds)),
                    transform=top.get_xaxis_transform(),
                    rotation=90,
                    ha="center",
                    va="top",
                    fontsize=7,
                    color="#b3261e",
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                )
            )
        self.title.set_text(title)
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            # A title (an image path) in a script the font lacks, Chinese say, is drawn with
            # boxes for those characters; matplotlib warns once per character on stderr, which
            # says nothing the user can act on. Only those warnings: any other one still shows.
            warnings.filterwarnings("ignore", message="Glyph .* missing", category=UserWarning)
            self.fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
        return buffer.getvalue()


def _symlog_label(linthresh: float) -> Callable[[float, object], str]:
    def label(value: float, _position: object) -> str:
        return "" if 0 < abs(value) <= linthresh * 1.001 else f"{value:g}"

    return label


_spare: list[DepthChart] = []
_warming: list[threading.Thread] = []


def warm_up() -> None:
    """Start making the report's fixed parts in a background thread: the chart's figure (its
    axes, legends and fonts are most of a chart's cost) and the page templates.

    Called when a run starts; the model's forward pass and the render threads spend their time
    in C with the GIL released, so this costs a whole run nothing, and the report at its end
    starts from a ready figure.
    """
    if _warming or _spare:
        return

    def make() -> None:
        from actviz.report.markup import environment

        with contextlib.suppress(Exception):  # a failure shows up when the report is built
            environment().get_template("index.html")
            _spare.append(DepthChart())

    thread = threading.Thread(target=make, name="actviz-report-warm-up", daemon=True)
    _warming.append(thread)
    thread.start()


def take_chart() -> DepthChart:
    """The figure :func:`warm_up` made (waiting for it if need be), or a new one."""
    while _warming:
        _warming.pop().join()
    return _spare.pop() if _spare else DepthChart()
