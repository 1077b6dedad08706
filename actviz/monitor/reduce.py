"""The reductions a recorded step takes of gradients, weights and selected outputs, each one
pass over memory at the speed the hardware gives it.

On a CPU, torch's float32 ``vector_norm`` (and ``_foreach_norm``, which loops over it there)
runs in one thread at about half the speed of BLAS's dot product over the same values, and
accumulates less exactly: over resnet18's 11.2 M weights, 1.35 ms against 0.61 ms with 2
threads; over 10 M normal values, relative errors 3.6e-4 against 4.6e-5. Both overflow alike
past 1.8e19 per value. So a large contiguous float32 tensor on a CPU is reduced by ``dot``; a
small one with the others in one ``_foreach_norm`` call (see :data:`FUSE_BELOW`); every other
tensor, and every tensor on an accelerator (where ``_foreach_norm`` is one fused kernel), by
torch's norms. ``count_nonzero`` on a CPU branches on each value: over a ReLU's output (half
zeros) it is 13x slower than counting the boolean cast 8 flags at a time (see
:func:`nonzero_count`), over values with no zeros about as fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["FUSE_BELOW", "fusable", "nonzero_count", "root", "squared_norm", "squared_norms"]


def squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of the squares as a 0-d float32 tensor, without a graph (the host takes the
    square root of what it reads). float16 and bfloat16 are accumulated in float32, so they
    cannot overflow; a sparse tensor is reduced over its stored values."""
    import torch

    x = tensor.detach()
    if x.layout == torch.sparse_coo:
        x = x.coalesce().values()
    elif x.layout != torch.strided:  # compressed sparse layouts
        x = x.values()
    if x.device.type == "cpu" and x.dtype == torch.float32:
        flat = _dense_flat(x)
        if flat is not None:
            total: torch.Tensor = torch.dot(flat, flat)
            return total
    if x.dtype in (torch.float16, torch.bfloat16, torch.float32):
        total = torch.linalg.vector_norm(x, dtype=torch.float32).square()
    else:  # float64, complex
        total = torch.linalg.vector_norm(x).square().float()
    return total


def _dense_flat(x: torch.Tensor) -> torch.Tensor | None:
    """``x``'s values as a 1-d view, when they fill their span of storage in some order
    (contiguous, channels-last, a transpose: the order changes neither a sum of squares nor a
    count); None otherwise (a slice with gaps, an expanded tensor)."""
    if x.is_contiguous():
        return x.view(-1)
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(x.stride(), x.shape, strict=True) if n > 1):
        if stride != expected:
            return None
        expected *= size
    return x.as_strided((x.numel(),), (1,))  # from x's own storage offset


#: Below this many values a float32 tensor on a CPU is reduced with the others in one
#: ``_foreach_norm`` call: a call per tensor costs more than the reduction. Over resnet18's
#: 49 small parameters, 0.23 ms against 0.81 ms for a ``dot`` each.
FUSE_BELOW = 65_536


def fusable(tensor: torch.Tensor) -> bool:
    """Whether :func:`squared_norms` reduces ``tensor`` in its fused call: a dense float32
    tensor on an accelerator, or a small one on a CPU."""
    import torch

    if tensor.dtype != torch.float32 or tensor.layout != torch.strided:
        return False
    return tensor.device.type != "cpu" or tensor.numel() < FUSE_BELOW


def squared_norms(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's :func:`squared_norm`; the :func:`fusable` ones in one fused call."""
    import torch

    fused = [i for i, t in enumerate(tensors) if fusable(t)]
    found: dict[int, torch.Tensor] = {}
    if fused:
        # Of detached tensors: no graph is recorded, with or without grad mode.
        norms = torch._foreach_norm([tensors[i].detach() for i in fused])
        found = dict(zip(fused, torch._foreach_mul(norms, norms), strict=True))
    return [found[i] if i in found else squared_norm(t) for i, t in enumerate(tensors)]


def root(value: float) -> float:
    """The norm from a read sum of squares (NaN and Inf stay what they are)."""
    return math.sqrt(value) if value >= 0 else math.nan


def nonzero_count(tensor: torch.Tensor) -> torch.Tensor:
    """How many values are not zero (NaN counts as not zero), as a 0-d int64 tensor. On a CPU
    from the boolean cast, read 8 flags at a time (:func:`_count_flags`); elsewhere by
    ``count_nonzero``, one reduction with no temporary."""
    import torch

    x = tensor.detach()
    if x.device.type != "cpu":
        return torch.count_nonzero(x)
    flags = x.bool()  # laid out as x is, when x is dense
    flat = _dense_flat(flags)
    return _count_flags(flags.reshape(-1) if flat is None else flat)


#: Words summed per lane: 127 ones per byte at most, so no byte carries into the next and the
#: top byte stays under the int64 sign bit.
_LANE_ROWS = 127


def _count_flags(flags: torch.Tensor) -> torch.Tensor:
    """The number of true values in a 1-d contiguous bool tensor.

    Each bool is one byte, 0 or 1. Read as int64 words, 8 flags a word, 127 rows of words are
    added column by column: each byte of a column's sum counts its flags with no carry
    between bytes. The sums, read as bytes again, are 127x fewer values to count. On a CPU
    this is 2x faster than summing the cast (which widens every flag to an integer first:
    336 us against 700 us over 1.6 M values) and, over a ReLU's output, 13x faster than
    ``count_nonzero`` (0.32 ms against 4.2 ms)."""
    import torch

    n = flags.numel()
    whole = n - n % (8 * _LANE_ROWS)
    total = flags[whole:].sum()
    if whole:
        words = flags[:whole].view(torch.uint8).view(torch.int64).view(_LANE_ROWS, -1)
        total = total + words.sum(0).view(torch.uint8).sum(dtype=torch.int64)
    return total
