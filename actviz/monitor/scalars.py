"""Numbers reduced on the device during a step, read back with one transfer at its end.

Hooks add 0-d tensors (a sum, a min, a count) or short vectors (a histogram's counts) as the
step runs and keep the index each got; nothing waits for the device meanwhile. At the end of
the step :meth:`ScalarBatch.read` joins them and copies them to the host in one ``tolist()``:
one synchronisation a step, however many layers and parameters are watched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["ScalarBatch"]


class ScalarBatch:
    """Tensors waiting to be read: floats and integer counts apart, so counts past 2**24 stay
    exact, and read together."""

    def __init__(self) -> None:
        self._floats: list[torch.Tensor] = []
        self._ints: list[torch.Tensor] = []
        self._n_floats = 0
        self._n_ints = 0

    def __len__(self) -> int:
        return self._n_floats + self._n_ints

    def add(self, value: torch.Tensor) -> int:
        """Queue a 0-d floating-point tensor; returns its index among the floats."""
        self._floats.append(value)
        self._n_floats += 1
        return self._n_floats - 1

    def add_block(self, values: torch.Tensor) -> int:
        """Queue a 1-d floating-point tensor of values; returns the index of its first value
        among the floats (the others follow it)."""
        start = self._n_floats
        self._floats.append(values)
        self._n_floats += int(values.shape[0])
        return start

    def add_count(self, value: torch.Tensor) -> int:
        """Queue a 0-d integer tensor; returns its index among the counts."""
        self._ints.append(value)
        self._n_ints += 1
        return self._n_ints - 1

    def add_counts(self, values: torch.Tensor) -> slice:
        """Queue a 1-d integer tensor; returns its place among the counts."""
        start = self._n_ints
        self._ints.append(values.reshape(-1))
        self._n_ints += int(values.numel())
        return slice(start, self._n_ints)

    def read(self) -> tuple[list[float], list[int]]:
        """Every queued value on the host, in one transfer; the batch is emptied."""
        import torch

        floats, ints, n_floats = self._floats, self._ints, self._n_floats
        self._floats, self._ints, self._n_floats, self._n_ints = [], [], 0, 0
        if not floats and not ints:
            return [], []
        device = (floats or ints)[0].device
        # float64 holds both kinds exactly (counts up to 2**53); MPS has no float64.
        wide = torch.float32 if device.type == "mps" else torch.float64
        parts = [_join(_runs(floats), device, wide)] if floats else []
        if ints:
            parts.append(_join(_runs(ints), device, wide))
        values = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
        return values[:n_floats], [int(v) for v in values[n_floats:]]


def _runs(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The queued values as 1-d tensors: each run of 0-d ones on one device stacked in one
    call, each block as it is."""
    import torch

    joined: list[torch.Tensor] = []
    run: list[torch.Tensor] = []
    for t in tensors:
        if t.dim() == 0 and (not run or t.device == run[0].device):
            run.append(t)
            continue
        if run:
            joined.append(torch.stack(run))
            run = []
        if t.dim() == 0:
            run.append(t)
        else:
            joined.append(t)
    if run:
        joined.append(torch.stack(run))
    return joined


def _join(tensors: list[torch.Tensor], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One 1-d tensor of ``dtype`` on ``device``: the 1-d ``tensors`` concatenated, in one call
    when all are on one device (mixed float16/float32 are promoted), one copy each
    otherwise."""
    import torch

    if len(tensors) == 1 and tensors[0].device == device:
        return tensors[0].to(dtype)
    if all(t.device == device for t in tensors):
        return torch.cat(tensors).to(dtype)
    return torch.cat([t.to(device, dtype) for t in tensors])
