"""The selected layers' outputs of a recorded training step, and the step's record.

Each floating-point tensor of a selected layer's output is reduced on the device (sum, sum of
squares, min, max, non-zero count, and the squared norm of the gradient reaching it) into the
step's :class:`~actviz.monitor.scalars.ScalarBatch`; :meth:`LayerSummaries.numbers` turns the read
values into the log's per-layer statistics."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actviz.hooks import tensor_items
from actviz.monitor.nonfinite import Origin
from actviz.monitor.reduce import FlagBuffer, nonzero_count, root, squared_norm
from actviz.monitor.scalars import ScalarBatch
from actviz.monitor.tensorboard import histogram_counts

if TYPE_CHECKING:
    import torch

__all__ = ["LayerSummaries", "step_record"]


class LayerSummaries:
    """The queued statistics of the selected layers' outputs in the current step.

    Args:
        scalars: Where the numbers are queued.
        histograms: Also queue each output's histogram (for TensorBoard).
    """

    def __init__(self, scalars: ScalarBatch, *, histograms: bool) -> None:
        self._scalars = scalars
        self._histograms = histograms
        self._flags = FlagBuffer()
        self.entries: dict[str, dict[str, Any]] = {}

    def add(
        self,
        key: str,
        output: object,
        sums: list[int | None],
        grad_norm: Callable[[int, torch.Tensor, Callable[[int], None]], None],
    ) -> None:
        """Queue the statistics of each floating-point tensor of a selected layer's output:
        sum (the non-finite watch's, when it has its own), norm, min, max, non-zero count.
        ``grad_norm(position, tensor, to)`` has the squared norm of the tensor's gradient
        queued when it comes, and its index given to ``to``; ``position`` is the tensor's
        place among ``sums`` (-1 when they do not match the output's tensors)."""
        import torch

        add, count = self._scalars.add, self._scalars.add_count
        if isinstance(output, torch.Tensor):  # the usual output: one tensor
            usable = output.is_floating_point() and output.numel() > 0
            tensors = [("", output)] if usable else []
        else:
            tensors = [
                (s, t) for s, t in tensor_items(output) if t.is_floating_point() and t.numel() > 0
            ]
        # The non-finite watch's slots are the same tensors, in the same order, when as many.
        aligned = len(sums) == len(tensors)
        for position, (suffix, tensor) in enumerate(tensors):
            # Reduced detached, so no graph is recorded: no ``no_grad`` block, which costs more
            # than a small reduction when the hook runs cold after a layer's forward.
            x = tensor.detach()
            low, high = torch.aminmax(x)  # one pass for both
            total = sums[position] if aligned else None
            entry: dict[str, Any] = {
                "n": x.numel(),
                "shape": list(x.shape),
                "sum": add(x.sum(dtype=torch.float32)) if total is None else total,
                "squares": add(squared_norm(x)),
                "min": add(low),
                "max": add(high),
                "nonzero": count(nonzero_count(x, self._flags)),
                # Counted only when the sum says there is a NaN or Inf (rarely): no pass
                # over every output for counts that are almost always zero.
                "tensor": x,
            }
            if self._histograms:
                entry["hist"] = self._scalars.add_counts(histogram_counts(x))
            self.entries[key + suffix] = entry
            if tensor.requires_grad:
                where = position if aligned else -1
                grad_norm(where, tensor, functools.partial(entry.__setitem__, "grad"))

    def numbers(
        self, floats: list[float], ints: list[int]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[int]]]:
        """Each layer's statistics from the step's read values, and its histogram counts."""
        layers = {key: _layer_numbers(entry, floats, ints) for key, entry in self.entries.items()}
        histograms = {
            key: ints[entry["hist"]] for key, entry in self.entries.items() if "hist" in entry
        }
        return layers, histograms

    def clear(self) -> None:
        """Drop the step's entries (and the outputs they hold)."""
        self.entries = {}


def step_record(
    step: int,
    loss: float | None,
    layers: dict[str, dict[str, Any]],
    params: dict[str, dict[str, float | None]],
    *,
    clipped: bool,
    origins: list[Origin],
) -> dict[str, Any]:
    """The log's record of a recorded step; ``clipped`` says whether the norms after
    clipping were taken."""
    record: dict[str, Any] = {
        "kind": "step",
        "step": step,
        "time": time.time(),
        "loss": loss,
        "grad_norm": _total(p.get("grad_norm") for p in params.values()),
        "grad_norm_clipped": (
            _total(p.get("grad_norm_clipped") for p in params.values()) if clipped else None
        ),
        "layers": layers,
        "params": params,
    }
    if origins:
        record["nonfinite"] = [
            {"phase": o.phase, "module": o.module, "value": o.value} for o in origins
        ]
    return record


def _total(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return math.sqrt(sum(v * v for v in known))


def _layer_numbers(entry: dict[str, Any], floats: list[float], ints: list[int]) -> dict[str, Any]:
    """A layer's statistics from its read values: over all values when they are finite,
    None (with the NaN and Inf counts) when they are not."""
    import torch

    n = int(entry["n"])
    nan = nonfinite = 0
    if not math.isfinite(floats[entry["sum"]]):
        # The output as it is now: an in-place op after the layer (a ReLU) may have changed
        # it since, which can only turn -inf into 0.
        x = entry["tensor"]
        nan = int(torch.isnan(x).sum())
        nonfinite = int((~torch.isfinite(x)).sum())
    row: dict[str, Any] = {
        "mean": None,
        "std": None,
        "min": floats[entry["min"]],
        "max": floats[entry["max"]],
        "zero_frac": (n - ints[entry["nonzero"]]) / n,
        "nan": nan,
        "inf": nonfinite - nan,
        "grad_norm": root(floats[entry["grad"]]) if "grad" in entry else None,
        "shape": entry["shape"],
    }
    if nonfinite == 0 and math.isfinite(floats[entry["sum"]]):
        mean = floats[entry["sum"]] / n
        square = floats[entry["squares"]] / n
        row["mean"] = mean
        row["std"] = math.sqrt(max(square - mean * mean, 0.0))
    else:
        row["min"] = row["max"] = None
    return row
