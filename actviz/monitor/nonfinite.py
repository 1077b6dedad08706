"""Where the first NaN or Inf of a step came from, forward and backward, over the whole model.

Every floating-point tensor a module receives or returns during a training forward is a
*slot*: it gets its sum reduced on the device (a NaN or an Inf anywhere shows in it), and,
when it requires grad, a tensor hook that reduces its gradient the same way. Each module
call records which slots were its inputs and which its outputs. After the step's one read
(:class:`~actviz.monitor.scalars.ScalarBatch`) the blame is plain bookkeeping on the host:

- forward: the first call to finish whose inputs were all finite and an output was not. A
  child finishes before its parent, so a leaf that made the NaN is named before the block
  around it; a block is named only when the NaN came from its own code between children.
  Modules downstream receive a non-finite input, so they are never blamed.
- backward: the module whose output gradients were finite and an input gradient was not, the
  one whose bad input gradient arrived first (the innermost, since the backward reaches it
  first).

Tensors are keyed by identity and version, so an in-place op (``ReLU(inplace=True)`` after a
batch-norm) makes a new slot: the batch-norm's output is checked before the ReLU overwrote it.
The output of a module that cannot make a finite input non-finite (a ReLU, a max-pool, a
flatten) shares its input's sum instead of taking its own, judged as the input is (a ``-inf``
allowed there stays allowed): it is not finite only when the input was not, such a module is
never an origin, and the pass is saved. The same holds backward, where its input gradient is
its output gradient masked or moved: a tensor such a module alone takes (a batch-norm's
output before its ReLU) has no gradient hook once the forward is done. Integer and bool
tensors are skipped. Modules on the ``allow_inf`` list may receive and return
``-inf`` (attention masks): a ``-inf`` in their tensors is not a fault, NaN and ``+inf`` are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.hooks import call_key, tensor_items
from actviz.monitor.reduce import squared_norm
from actviz.monitor.scalars import ScalarBatch

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

__all__ = ["Origin", "OriginTracker"]

#: Names given to the places outside every module where a non-finite value can appear.
INPUT_NAME = "(model input)"
LOSS_NAME = "(loss)"
#: The name the whole model goes by (its own code, between its children).
ROOT_NAME = "(model)"


@dataclass
class Origin:
    """Where a non-finite value first appeared in one step.

    Attributes:
        phase: ``forward`` or ``backward``.
        module: The module's qualified name, ``name:N`` for its N-th call in the step;
            ``(model input)`` or ``(loss)`` when it came from outside the model's modules.
        module_type: The module's class name (empty outside modules).
        value: ``NaN`` or ``Inf``.
        call: Index of the call in the step, to find its inputs.
        step: The first step it appeared at (-1 until the watch logs it).
        count: The steps it appeared at: a NaN in the weights shows at every step after it,
            from the same place, and stays one origin.
    """

    phase: str
    module: str
    module_type: str
    value: str
    call: int = -1
    step: int = -1
    count: int = 1


@dataclass
class _Slot:
    total: int  # index of the sum in the scalar batch
    relaxed: bool  # -inf allowed
    # Held until the step is read: while it lives, no other tensor takes its id.
    tensor: torch.Tensor | None
    grad: list[int] = field(default_factory=list)  # the sum of each gradient
    # The slot whose sum ``total`` is (the module's input), or -1: its own.
    source: int = -1
    # Given the index of the squared norm of each gradient, taken in the same hook.
    norm_to: Callable[[int], None] | None = None
    hook: RemovableHandle | None = None  # the gradient's hook, until it is removed
    consumers: int = 0  # module calls that took it as an input


@dataclass
class _Call:
    key: str
    module_type: str
    inputs: list[int]
    outputs: list[int] = field(default_factory=list)
    args: tuple[Any, ...] = ()
    done: bool = False
    keeps_finite: bool = False  # a finite input makes a finite output (see _keeps_finite)


def _value_kind(total: float, *, relaxed: bool) -> str | None:
    """``NaN``, ``Inf`` or None (finite) from a tensor's sum.

    One reduction tells: a NaN anywhere makes the sum NaN, an Inf makes it infinite (or NaN
    beside an Inf of the other sign). A sum can also overflow float32 with every value finite,
    from values around 1e33 and up: far past where a training run is healthy anyway."""
    if math.isnan(total):
        return "NaN"
    if total == math.inf or (total == -math.inf and not relaxed):
        return "Inf"
    return None


def _finite_preserving() -> tuple[type, ...]:
    """Module classes whose output is finite whenever their input is: clamps, maxima and
    reshapes, which add nothing and multiply by nothing."""
    from torch import nn

    return (
        nn.ReLU,
        nn.Hardtanh,  # and ReLU6
        nn.MaxPool1d,
        nn.MaxPool2d,
        nn.MaxPool3d,
        nn.Identity,
        nn.Flatten,
        nn.Unflatten,
    )


class OriginTracker:
    """Slots and module calls of one step; :meth:`blame` names the origins after the read.

    Args:
        scalars: Where the reductions go (the step's one batch).
        allow_inf: Qualified names of modules whose tensors may hold ``-inf``.
    """

    def __init__(self, scalars: ScalarBatch, allow_inf: Iterable[str] = ()) -> None:
        import torch

        self._tensor = torch.Tensor
        self._float32 = torch.float32
        self._keeps_finite = _finite_preserving()
        self.scalars = scalars
        self.allow_inf = frozenset(allow_inf)
        self._slots: list[_Slot] = []
        self._by_key: dict[tuple[int, int], int] = {}
        self._calls: list[_Call] = []
        self._grad_order: list[tuple[int, int]] = []  # (slot, index in its grad list), in time
        self._finished: list[int] = []  # calls in the order they returned: a child first

    def reset(self) -> None:
        """Forget the step (its tensors are released)."""
        for slot in self._slots:
            if slot.hook is not None:
                slot.hook.remove()
        self._slots.clear()
        self._by_key.clear()
        self._calls.clear()
        self._grad_order.clear()
        self._finished.clear()

    def begin(self, name: str, module: torch.nn.Module, args: tuple[Any, ...], call: int) -> int:
        """A module call starts (a forward pre-hook): its inputs become slots. Returns the
        call's index, to hand to :meth:`end`."""
        relaxed = name in self.allow_inf
        if len(args) == 1 and isinstance(args[0], self._tensor):  # the usual call: one tensor
            inputs = [self._slot(args[0], relaxed=relaxed)]
        else:
            inputs = [self._slot(t, relaxed=relaxed) for _, t in tensor_items(args)]
        for i in inputs:
            if i >= 0:
                self._slots[i].consumers += 1
        self._calls.append(
            _Call(
                call_key(name, call),
                type(module).__name__,
                [i for i in inputs if i >= 0],
                args=args,
                keeps_finite=isinstance(module, self._keeps_finite),
            )
        )
        return len(self._calls) - 1

    def end(self, index: int, name: str, output: object) -> list[int]:
        """The call ``index`` returned ``output`` (a forward hook): its tensors become slots.
        Returns the new slots' indices."""
        relaxed = name in self.allow_inf
        call = self._calls[index]
        if isinstance(output, self._tensor):
            share = -1
            if call.keeps_finite and len(call.inputs) == 1 and not relaxed:
                share = call.inputs[0]
            outputs = [self._slot(output, relaxed=relaxed, new=True, share=share)]
        else:
            outputs = [self._slot(t, relaxed=relaxed, new=True) for _, t in tensor_items(output)]
        call.outputs = [i for i in outputs if i >= 0]
        call.done = True
        self._finished.append(index)
        if name == ROOT_NAME:
            self._unwatch_passed_gradients(call.outputs)
        return call.outputs

    def _unwatch_passed_gradients(self, returned: list[int]) -> None:
        """The model's forward is done: drop the gradient hook of each tensor whose one
        consumer is a module that cannot make a finite gradient non-finite
        (:func:`_finite_preserving`: its input gradient is its output gradient, masked or
        moved). That gradient is not finite only when the module's output gradient, watched
        and read earlier in the backward, was not, so the blame is the same and a pass is
        saved: a ReLU's input, after every batch-norm. The model's outputs keep theirs (the
        loss's gradient reaches them too)."""
        for call in self._calls:
            if not (call.keeps_finite and call.done and len(call.inputs) == 1):
                continue
            slot = call.inputs[0]
            s = self._slots[slot]
            kept = s.consumers > 1 or s.norm_to is not None or slot in returned
            if s.hook is not None and not kept:
                s.hook.remove()
                s.hook = None

    def slot_sum(self, slot: int) -> int | None:
        """The scalar index of a slot's sum (to reuse as a statistic); None when the slot
        shares its module's input's."""
        s = self._slots[slot]
        return None if s.source >= 0 else s.total

    def grad_norm(self, slot: int, to: Callable[[int], None]) -> bool:
        """Have the slot's gradient hook also take the squared norm of the gradient, calling
        ``to`` with its scalar index: one hook and, on a CPU, one pass for both. False when
        the slot's gradient is not watched (register another hook)."""
        s = self._slots[slot]
        if s.hook is None or s.norm_to is not None:  # its gradient is not watched
            return False
        s.norm_to = to
        return True

    def _slot(
        self, tensor: torch.Tensor, *, relaxed: bool, new: bool = False, share: int = -1
    ) -> int:
        """The slot of ``tensor`` as it is now; made (and reduced) when first seen. An output
        is always a new version unless the module returned its input untouched. With
        ``share``, a new slot takes that slot's sum instead of reducing ``tensor``."""
        if not tensor.is_floating_point() or tensor.numel() == 0:
            return -1
        key = (id(tensor), tensor._version)
        known = self._by_key.get(key)
        if known is not None:
            if relaxed:
                self._slots[known].relaxed = True
            return known
        if share >= 0:
            slot = _Slot(self._slots[share].total, relaxed, tensor, source=share)
        else:
            # Of a detached tensor: no graph is recorded, with or without grad mode.
            total = self.scalars.add(tensor.detach().sum(dtype=self._float32))
            slot = _Slot(total, relaxed, tensor)
        index = len(self._slots)
        self._slots.append(slot)
        self._by_key[key] = index
        if tensor.requires_grad:
            slot.hook = tensor.register_hook(self._grad_hook(index))  # type: ignore[no-untyped-call]
        return index

    def _grad_hook(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            if grad.numel() == 0 or not grad.is_floating_point():
                return
            slot = self._slots[index]
            if slot.norm_to is None:
                total = self.scalars.add(grad.detach().sum(dtype=self._float32))
            else:
                norm = squared_norm(grad)
                total = self.scalars.add(norm)
                slot.norm_to(total)
                # A finite sum of squares says every value is finite: it stands for the sum.
                # Reading it on a CPU waits for nothing; past about 1.8e19 a value's square
                # overflows, and then the sum itself says.
                if grad.device.type != "cpu" or not math.isfinite(norm.item()):
                    total = self.scalars.add(grad.detach().sum(dtype=self._float32))
            slot.grad.append(total)
            self._grad_order.append((index, len(slot.grad) - 1))

        return hook

    def call_args(self, call: int) -> tuple[Any, ...]:
        return self._calls[call].args if 0 <= call < len(self._calls) else ()

    def blame(self, floats: list[float]) -> list[Origin]:
        """The step's origin (none or one), from the read values."""
        # A non-finite forward makes a non-finite backward: only the forward is the origin.
        forward = self._blame_forward(floats)
        if forward is not None:
            return [forward]
        backward = self._blame_backward(floats)
        return [] if backward is None else [backward]

    def _kind(self, floats: list[float], slot: int) -> str | None:
        s = self._slots[slot]
        # A shared sum is judged as its input's: a -inf allowed there (a mask) is not the
        # fault of a ReLU that passed it on (as 0) or a max-pool.
        relaxed = s.relaxed or (s.source >= 0 and self._slots[s.source].relaxed)
        return _value_kind(floats[s.total], relaxed=relaxed)

    def _grad_kind(self, floats: list[float], slot: int, which: int = -1) -> str | None:
        s = self._slots[slot]
        if not s.grad:
            return None
        return _value_kind(floats[s.grad[which]], relaxed=False)

    def _blame_forward(self, floats: list[float]) -> Origin | None:
        bad = {i for i in range(len(self._slots)) if self._kind(floats, i) is not None}
        if not bad:
            return None
        for index in self._finished:
            call = self._calls[index]
            if any(i in bad for i in call.inputs):
                continue
            culprit = next((o for o in call.outputs if o in bad), None)
            if culprit is not None:
                kind = self._kind(floats, culprit) or "NaN"
                return Origin("forward", call.key, call.module_type, kind, index)
        first = min(bad)
        return Origin("forward", INPUT_NAME, "", self._kind(floats, first) or "NaN")

    def _blame_backward(self, floats: list[float]) -> Origin | None:
        # The first gradient, in the order the backward produced them, that is not finite.
        first_bad = None
        for slot, which in self._grad_order:
            if self._grad_kind(floats, slot, which) is not None:
                first_bad = (slot, which)
                break
        if first_bad is None:
            return None
        slot, which = first_bad
        kind = self._grad_kind(floats, slot, which) or "NaN"
        # Candidates: calls with that slot as an input whose output gradients were finite;
        # a block and the child inside it that took the same input both qualify, and the
        # child is the more precise answer. A ReLU beside the module that made it cannot
        # have: its input gradient is its output gradient, masked.
        candidates = [
            index
            for index, call in enumerate(self._calls)
            if call.done
            and not call.keeps_finite
            and slot in call.inputs
            and all(self._grad_kind(floats, o) is None for o in call.outputs)
        ]
        keys = [self._calls[i].key.split(":")[0] for i in candidates]
        for index, key in zip(candidates, keys, strict=True):
            encloses = len(candidates) > 1 and (
                key == ROOT_NAME or any(k != key and k.startswith(key + ".") for k in keys)
            )
            if not encloses:
                call = self._calls[index]
                return Origin("backward", call.key, call.module_type, kind, index)
        return Origin("backward", LOSS_NAME, "", kind)
