"""The parameters' numbers of a recorded training step: each gradient's norm before clipping
(on the parameter's post-accumulate-grad hook), after clipping (on the optimizer's step
pre-hook), and the weight norm and update-to-weight ratio (on its step post-hook).

Every number is queued in a :class:`~actviz.monitor.scalars.ScalarBatch` as an index and read
with the rest of the step."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.monitor.reduce import (
    BlockPlan,
    block_plan,
    fusable,
    root,
    squared_norm,
    squared_norm_block,
)
from actviz.monitor.scalars import ScalarBatch

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = ["UPDATE_SAMPLE", "ParamWatch"]

#: Values of a parameter the update ratio is measured on, at most: a copy of every weight at
#: every recorded step would cost as much memory traffic as the step itself.
UPDATE_SAMPLE = 16_384
#: Consecutive values the sample reads at a time.
SAMPLE_RUN = 64


class ParamWatch:
    """The hooks on a model's parameters and its optimizer, and what they queued this step.

    Args:
        model: The model whose parameters are watched.
        optimizer: Its optimizer, or None (no norms after clipping, no update ratios).
        scalars: Where the numbers are queued.
        recording: Whether the current step is a recorded one.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        scalars: ScalarBatch,
        recording: Callable[[], bool],
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self._scalars = scalars
        self._recording = recording
        self.order: list[str] = []
        self._pre_clip: dict[str, int] = {}
        # The gradient each pre-clip norm was taken on, and its version then: when the
        # optimizer steps on the same, untouched tensor (no clipping), its norm is reused.
        # Dropped once the optimizer's pre-hook has looked, so that ``zero_grad`` frees the
        # gradients where the loop expects it to, not at the end of the step.
        self._pre_clip_grad: dict[str, tuple[torch.Tensor, int]] = {}
        self._post_clip: dict[str, int] = {}
        # Gradients accumulated in the running backward whose norms are taken together when it
        # ends (one fused call instead of one per parameter): all on an accelerator, the
        # small ones on a CPU.
        self._pending: list[tuple[str, torch.Tensor]] = []
        # The plan whose sample buffers hold this step's values before the update.
        self._before: _UpdatePlan | None = None
        # Kept from step to step: the optimizer's parameters by name (rebuilt when its
        # parameters change), and the plan of their update numbers (rebuilt when they change
        # or one gets new storage).
        self._pairs_key: tuple[int, ...] = ()
        self._pair_names: list[str] = []
        self._plan: _UpdatePlan | None = None
        self._update: dict[str, tuple[int, int, int]] = {}

    def hook(
        self, keep: Callable[[RemovableHandle], None], after_update: Callable[..., None]
    ) -> None:
        """Register the hooks, each handle passed to ``keep``; ``after_update`` is the
        optimizer's step post-hook (which calls :meth:`after_update` in turn)."""
        self.order = list(self.named())
        for name, param in self.named().items():
            if param.requires_grad:
                hook = self._pre_clip_hook(name)
                # torch leaves this one unannotated.
                keep(param.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]
        if self.optimizer is not None:
            keep(self.optimizer.register_step_pre_hook(self._on_optimizer_pre))
            keep(self.optimizer.register_step_post_hook(after_update))

    def named(self) -> dict[str, torch.nn.Parameter]:
        """The model's parameters by name, then any other the optimizer holds."""
        named = dict(self.model.named_parameters())
        if self.optimizer is None:
            return named
        known = {id(p) for p in named.values()}
        for g, group in enumerate(self.optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                if id(param) not in known:
                    named[f"(optimizer group {g} #{i})"] = param
        return named

    def _optimizer_params(self) -> list[tuple[str, torch.Tensor]]:
        assert self.optimizer is not None
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        key = tuple(id(p) for p in params)
        if key != self._pairs_key:
            names = {id(p): n for n, p in self.named().items()}
            self._pairs_key, self._pair_names = key, [names[id(p)] for p in params]
        return [(n, p) for n, p in zip(self._pair_names, params, strict=True) if p.grad is not None]

    def _update_plan(self, params: list[torch.Tensor]) -> _UpdatePlan:
        """The plan for these parameters: the one kept while they are the same tensors on
        the same storage, a new one otherwise."""
        key = tuple((id(p), p.data_ptr()) for p in params)
        if self._plan is None or self._plan.key != key:
            self._plan = _UpdatePlan.make(key, params)
        return self._plan

    def _pre_clip_hook(self, name: str) -> Any:
        def hook(param: torch.Tensor) -> None:
            import torch

            grad = param.grad
            if grad is None or not self._recording():
                return
            if not fusable(grad):
                # Read now, while the backward's last write left it in the cache: at the end
                # of the backward most gradients are back in main memory.
                self._pre_clip[name] = self._scalars.add(squared_norm(grad))
                if self.optimizer is not None:
                    self._pre_clip_grad[name] = (grad, grad._version)
                return
            if not self._pending:
                # Runs once the backward is done, before anything (a clip) can touch a grad.
                torch.autograd.Variable._execution_engine.queue_callback(self._take_pre_clip)
            self._pending.append((name, grad))

        return hook

    def _take_pre_clip(self) -> None:
        """The norms of the gradients the backward just accumulated, before any clipping."""
        pending, self._pending = self._pending, []
        # Every one was fusable when its hook kept it: one call for all.
        every = list(range(len(pending)))
        block, places = squared_norm_block(
            [grad for _, grad in pending], BlockPlan(every, [], every)
        )
        start = self._scalars.add_block(block)
        for (name, grad), place in zip(pending, places, strict=True):
            self._pre_clip[name] = start + place
            if self.optimizer is not None:
                self._pre_clip_grad[name] = (grad, grad._version)

    def _on_optimizer_pre(self, *_: Any) -> None:
        import torch

        if not self._recording():
            return
        pairs = self._optimizer_params()
        if not pairs:
            return
        # A gradient nothing changed since its pre-clip norm was taken has that norm: one
        # pass over every gradient less when the loop does not clip.
        changed = []
        for name, param in pairs:
            seen = self._pre_clip_grad.get(name)
            if seen is not None and seen[0] is param.grad and seen[1] == param.grad._version:
                self._post_clip[name] = self._pre_clip[name]
            else:
                changed.append((name, param))
        self._pre_clip_grad.clear()
        with torch.no_grad():
            if changed:
                grads = [p.grad for _, p in changed if p.grad is not None]
                block, places = squared_norm_block(grads)
                start = self._scalars.add_block(block)
                for (name, _param), place in zip(changed, places, strict=True):
                    self._post_clip[name] = start + place
            plan = self._update_plan([p for _, p in pairs])
            for samples in plan.samples:
                torch._foreach_copy_(samples.buffers, samples.current())
            self._before = plan

    def after_update(self) -> None:
        """The optimizer stepped: queue each parameter's update and weight norms."""
        import torch

        before, self._before = self._before, None
        if before is None:
            return
        pairs = self._optimizer_params()
        params = [p for _, p in pairs]
        if self._update_plan(params) is not before:
            return  # the optimizer's parameters changed inside the step
        add = self._scalars.add_block
        with torch.no_grad():
            where: list[tuple[int, int]] = [(0, 0)] * len(pairs)  # (delta, old) indices
            for samples in before.samples:
                old = add(samples.squares())
                # The copies are taken anew before the next update: the update (negated) is
                # written over them, with no tensor made for it.
                torch._foreach_sub_(samples.buffers, samples.current())
                delta = add(samples.squares())
                for j, i in enumerate(samples.positions):
                    where[i] = (delta + j, old + j)
            new, new_at = squared_norm_block(params, before.weights)
        n = add(new)
        for i, (name, _param) in enumerate(pairs):
            self._update[name] = (*where[i], n + new_at[i])

    def weight_norms(self) -> dict[str, int]:
        """Queue the weight norms of a recorded step without an optimizer (no update, so no
        post-hook took them)."""
        import torch

        params = [(n, p) for n, p in self.named().items() if p.requires_grad]
        if not params:
            return {}
        with torch.no_grad():
            block, places = squared_norm_block([p for _, p in params])
        start = self._scalars.add_block(block)
        return {n: start + place for (n, _), place in zip(params, places, strict=True)}

    @property
    def clipped(self) -> bool:
        """Whether the norms after clipping were taken this step."""
        return bool(self._post_clip)

    def numbers(
        self, floats: list[float], weights: dict[str, int]
    ) -> dict[str, dict[str, float | None]]:
        """Each parameter's numbers from the step's read values, in the model's order
        whatever order the hooks fired in."""
        params: dict[str, dict[str, float | None]] = {
            name: {} for name in self.order if name in self._pre_clip or name in weights
        }
        for name, index in self._pre_clip.items():
            params.setdefault(name, {})["grad_norm"] = root(floats[index])
        for name, index in self._post_clip.items():
            params.setdefault(name, {})["grad_norm_clipped"] = root(floats[index])
        for name, (d, o, n) in self._update.items():
            row = params.setdefault(name, {})
            row["weight_norm"] = root(floats[n])
            row["update_ratio"] = root(floats[d] / floats[o]) if floats[o] > 0 else None
        for name, index in weights.items():
            params.setdefault(name, {})["weight_norm"] = root(floats[index])
        return params

    def release(self) -> None:
        """Forget everything kept from step to step (the watch ends)."""
        self.clear()
        self._plan = None
        self._pairs_key, self._pair_names = (), []

    def clear(self) -> None:
        """Forget the step's queued numbers (and a copy taken before an update)."""
        self._pre_clip.clear()
        self._pre_clip_grad.clear()
        self._pending = []
        self._post_clip.clear()
        self._update.clear()
        self._before = None


def _sample(param: torch.Tensor) -> torch.Tensor:
    """The values the update ratio is measured on: all of a small tensor; of a large one,
    runs of :data:`SAMPLE_RUN` consecutive values, every k-th run, k the smallest prime that
    brings the count under :data:`UPDATE_SAMPLE` (runs of many values cover every kernel
    position alike, and a prime stride does not keep landing on the same channel). Runs, not
    single values: a strided read costs a cache line a value, as much memory traffic as the
    whole weight."""
    flat = param.detach().reshape(-1)
    n = flat.numel()
    if n <= UPDATE_SAMPLE:
        return flat
    runs = n // SAMPLE_RUN
    return flat[: runs * SAMPLE_RUN].view(runs, SAMPLE_RUN)[:: _stride(runs)]


@functools.lru_cache(maxsize=1024)
def _stride(runs: int) -> int:
    """The sampling stride, in runs, of a tensor of ``runs`` runs (the same at every step)."""
    stride = -(-runs // (UPDATE_SAMPLE // SAMPLE_RUN))
    while any(stride % d == 0 for d in range(2, int(stride**0.5) + 1)):
        stride += 1
    return stride


@dataclass(frozen=True)
class _Samples:
    """The update ratio's samples of the parameters on one device in one dtype, copied into
    one buffer of rows of :data:`SAMPLE_RUN` values, each parameter's on whole rows of its own
    (the rest of its last row stays zero). Each parameter's sum of squares is then one norm
    over the rows and one indexed sum, where a norm per parameter costs a call each (on a
    CPU, ``_foreach_norm`` loops over them: 94 us against 30 us for resnet18's 62)."""

    positions: list[int]  # the parameters' places in the optimizer's list
    params: list[torch.Tensor]
    # Each parameter's sampled view of its storage, or None where the sample is a copy (a
    # parameter that is not contiguous), taken anew each time.
    views: list[torch.Tensor | None]
    rows: torch.Tensor
    buffers: list[torch.Tensor]  # each sample's place in ``rows``, shaped as the sample
    owner: torch.Tensor  # the position (in ``positions``) each row belongs to

    @classmethod
    def make(cls, positions: list[int], params: list[torch.Tensor]) -> _Samples:
        import torch

        views: list[torch.Tensor | None] = []
        shapes, sizes = [], []
        for param in params:
            view = _sample(param)
            own = view.untyped_storage().data_ptr() == param.untyped_storage().data_ptr()
            views.append(view if own else None)
            shapes.append(view.shape)
            sizes.append(view.numel())
        counts = [-(-n // SAMPLE_RUN) for n in sizes]
        first = params[0]
        rows = torch.zeros(sum(counts), SAMPLE_RUN, dtype=first.dtype, device=first.device)
        flat = rows.view(-1)
        buffers, start = [], 0
        for shape, n, count in zip(shapes, sizes, counts, strict=True):
            buffers.append(flat[start : start + n].view(shape))
            start += count * SAMPLE_RUN
        owner = torch.repeat_interleave(
            torch.arange(len(params), device=first.device),
            torch.tensor(counts, device=first.device),
        )
        return cls(positions, params, views, rows, buffers, owner)

    def current(self) -> list[torch.Tensor]:
        """The samples' values now (views, or copies taken now)."""
        return [
            _sample(p) if v is None else v for v, p in zip(self.views, self.params, strict=True)
        ]

    def squares(self) -> torch.Tensor:
        """Each parameter's sum of squares over what the buffer holds, as float32 (float16
        and bfloat16 accumulated in float32)."""
        import torch

        low = self.rows.dtype in (torch.float16, torch.bfloat16)
        norms = torch.linalg.vector_norm(self.rows, dim=1, dtype=torch.float32 if low else None)
        squares = norms.square().float()
        total = torch.zeros(len(self.params), device=self.rows.device)
        return total.index_add_(0, self.owner, squares)


@dataclass(frozen=True)
class _UpdatePlan:
    """What the update numbers need of one list of the optimizer's parameters, kept while
    they are the same tensors on the same storage: the samples' buffers (one per device and
    dtype), and how the weight norms are taken."""

    key: tuple[tuple[int, int], ...]  # each parameter's id and data pointer
    samples: list[_Samples]
    weights: BlockPlan

    @classmethod
    def make(cls, key: tuple[tuple[int, int], ...], params: Sequence[torch.Tensor]) -> _UpdatePlan:
        groups: dict[tuple[object, object], list[int]] = {}
        for i, param in enumerate(params):
            groups.setdefault((param.device, param.dtype), []).append(i)
        samples = [_Samples.make(at, [params[i] for i in at]) for at in groups.values()]
        # The large weights one by one from the last: the optimizer updated them in order,
        # so the last ones may still be in the cache.
        return cls(key, samples, block_plan(params, rest_last_first=True))
