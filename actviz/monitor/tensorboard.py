"""TensorBoard output of the training monitor: the log's scalars, activation histograms with
fixed edges, and the probe pictures, under ``out/tensorboard``.

Histograms are counted on the device in the layer hook (:func:`histogram_counts`) with the same
edges at every step and for every layer, so TensorBoard's views compare across steps; NaN and
Inf never enter them (TensorBoard's own ``add_histogram`` fails on them): they are the
``nan`` and ``inf`` scalars beside. A NaN or Inf loss or total gradient norm, which TensorBoard
would drop, is marked by ``train/<key>/nonfinite`` = 1 at its step. TensorBoard is an
optional extra, imported only here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import import_extra

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["HIST_EDGES", "TensorBoardSink", "histogram_counts"]

_BIG = 3.4e38  # about float32's largest: every finite value lies within +-_BIG

#: The histogram bucket edges: 0, and +-10**k for k from -4 to 4 in quarter decades, closed by
#: +-_BIG. Fixed, so the histograms of every step and layer share one axis.
HIST_EDGES: tuple[float, ...] = (
    (-_BIG,)
    + tuple(-(10 ** (k / 4)) for k in range(16, -17, -1))
    + (0.0,)
    + tuple(10 ** (k / 4) for k in range(-16, 17))
    + (_BIG,)
)


@functools.cache
def _edges(device: str) -> torch.Tensor:
    import torch

    return torch.tensor(HIST_EDGES, dtype=torch.float32, device=device)


def histogram_counts(x: torch.Tensor) -> torch.Tensor:
    """Counts of ``x`` per bucket of :data:`HIST_EDGES`, on ``x``'s device: ``len(edges) + 1``
    integers, the first counting ``-inf``, the last ``+inf`` and NaN, the others the finite
    values in ``(edges[i - 1], edges[i]]``."""
    import torch

    edges = _edges(str(x.device))
    index = torch.bucketize(x.reshape(-1).float(), edges)
    return torch.bincount(index, minlength=len(HIST_EDGES) + 1)


class TensorBoardSink:
    """Writes each step record (and its histograms and pictures) as TensorBoard events.

    Raises:
        UsageError: When TensorBoard is not installed; the message gives the pip command.
    """

    def __init__(self, folder: Path) -> None:
        # torch's writer imports the tensorboard package: its absence shows here.
        writers = import_extra(
            "torch.utils.tensorboard", "tensorboard", "tensorboard=True needs TensorBoard"
        )
        self.log_dir = folder / "tensorboard"
        self._writer: Any = writers.SummaryWriter(log_dir=str(self.log_dir))

    def write(self, record: Mapping[str, Any], histograms: Mapping[str, Sequence[int]]) -> None:
        """The step's scalars, and a histogram per layer from its bucket counts."""
        step = int(record["step"])
        scalar = self._writer.add_scalar
        for key in ("loss", "grad_norm", "grad_norm_clipped"):
            value = record.get(key)
            if _is_number(value):
                scalar(f"train/{key}", value, step)
            elif isinstance(value, float):
                # TensorBoard drops a NaN or Inf scalar without a trace: the marker beside it
                # (1 where the value was not finite) keeps the step from looking healthy.
                scalar(f"train/{key}/nonfinite", 1.0, step)
        for group in ("layers", "params"):
            for name, row in (record.get(group) or {}).items():
                for key, value in row.items():
                    if _is_number(value):
                        scalar(f"{group}/{name}/{key}", value, step)
        for name, counts in histograms.items():
            row = (record.get("layers") or {}).get(name) or {}
            self._histogram(f"activations/{name}", row, counts, step)
        self._writer.flush()

    def _histogram(
        self, tag: str, row: Mapping[str, Any], counts: Sequence[int], step: int
    ) -> None:
        finite = list(counts[1:-1])  # the buckets between -inf and +inf/NaN
        num = sum(finite)
        if num == 0:
            return
        limits = list(HIST_EDGES[1:])
        used = [i for i, c in enumerate(finite) if c]
        # Statistics of the finite values: the log's when the layer was all finite, else the
        # buckets' own bounds.
        mean, std = row.get("mean"), row.get("std")
        if isinstance(mean, float) and isinstance(std, float) and _is_number(mean + std):
            total, squares = mean * num, num * (std * std + mean * mean)
        else:
            total, squares = 0.0, 0.0
        low = row.get("min") if _is_number(row.get("min")) else HIST_EDGES[used[0]]
        high = row.get("max") if _is_number(row.get("max")) else limits[used[-1]]
        # TensorBoard draws from the first to the last non-empty bucket.
        first, last = used[0], used[-1] + 1
        self._writer.add_histogram_raw(
            tag,
            min=low,
            max=high,
            num=num,
            sum=total,
            sum_squares=squares,
            bucket_limits=limits[first:last],
            bucket_counts=finite[first:last],
            global_step=step,
        )

    def add_image(self, tag: str, rgb: np.ndarray, step: int) -> None:
        """An ``(H, W, 3)`` uint8 picture."""
        self._writer.add_image(tag, rgb, step, dataformats="HWC")

    def close(self) -> None:
        self._writer.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
