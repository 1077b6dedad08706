"""Scalars reduced on the device during a step, read back with one transfer at its end.

Hooks add 0-d tensors (a sum, a min, a count) as the step runs and keep the index each got;
nothing waits for the device meanwhile. At the end of the step :meth:`ScalarBatch.read`
stacks them and copies them to the host in one ``tolist()``: one synchronisation a step,
however many layers and parameters are watched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["ScalarBatch"]


class ScalarBatch:
    """0-d tensors waiting to be read: floats and integer counts apart, so counts past 2**24
    stay exact, and read together."""

    def __init__(self) -> None:
        self._floats: list[torch.Tensor] = []
        self._ints: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self._floats) + len(self._ints)

    def add(self, value: torch.Tensor) -> int:
        """Queue a 0-d floating-point tensor; returns its index among the floats."""
        self._floats.append(value)
        return len(self._floats) - 1

    def add_count(self, value: torch.Tensor) -> int:
        """Queue a 0-d integer tensor; returns its index among the counts."""
        self._ints.append(value)
        return len(self._ints) - 1

    def read(self) -> tuple[list[float], list[int]]:
        """Every queued value on the host, in one transfer; the batch is emptied."""
        import torch

        floats, ints = self._floats, self._ints
        self._floats, self._ints = [], []
        if not floats and not ints:
            return [], []
        device = (floats or ints)[0].device
        # float64 holds both kinds exactly (counts up to 2**53); MPS has no float64.
        wide = torch.float32 if device.type == "mps" else torch.float64
        parts = []
        if floats:
            parts.append(torch.stack([f.to(device) for f in floats]).to(wide))
        if ints:
            parts.append(torch.stack([i.to(device) for i in ints]).to(wide))
        values = torch.cat(parts).tolist() if len(parts) > 1 else parts[0].tolist()
        return values[: len(floats)], [int(v) for v in values[len(floats) :]]
