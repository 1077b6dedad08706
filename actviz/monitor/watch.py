"""``actviz.watch``: statistics of a model while it trains, and where the first NaN came from.

One :class:`Watch` is one :class:`~actviz.hooks.HookSession` on every module of the model:

- On every step, every module's inputs and outputs (and their gradients) are checked for NaN
  and Inf (:mod:`actviz.monitor.nonfinite`), the whole model whether ``layers`` selects a
  module or not.
- Every ``every`` steps, each selected layer's output is summarised (mean, std, min, max,
  fraction of zeros, NaN and Inf counts, the norm of the gradient reaching it) and each
  parameter's gradient norm (before and after clipping), weight norm and update-to-weight
  ratio are taken, in hooks on the parameters and on the optimizer's step.

Everything is reduced on the device into 0-d tensors and read with one transfer at the end of
the step (:class:`~actviz.monitor.scalars.ScalarBatch`); what the step held is dropped then.
The model's training flags and autograd are left alone: the hooks read, never change.

A step ends at ``w.step()``; a loop that never calls it has its steps ended by the optimizer's
step (or, with no optimizer, by each training forward), at the next forward or at exit.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz._version import __version__
from actviz.errors import NonFiniteError, UsageError
from actviz.hooks import HookSession, call_key, tensor_items
from actviz.monitor.log import LogWriter
from actviz.monitor.nonfinite import ROOT_NAME, Origin, OriginTracker
from actviz.monitor.scalars import ScalarBatch

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.monitor.flags import Flag
    from actviz.monitor.probe import ProbeSink
    from actviz.monitor.tensorboard import TensorBoardSink

__all__ = ["NONFINITE_MODES", "Watch", "watch"]

NONFINITE_MODES = ("record", "raise", "off")


class Watch(HookSession):
    """The context manager :func:`watch` returns; see there. Attributes useful in the loop:

    Attributes:
        steps: Steps finished so far.
        origins: Every non-finite origin recorded, earliest first.
        flags: Every flag raised so far (each with the step it began).
        log_path: The JSON Lines log.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        selected: Sequence[str],
        *,
        every: int,
        out: Path,
        on_nonfinite: str,
        allow_inf: Sequence[str],
        tensorboard: TensorBoardSink | None = None,
        probe: ProbeSink | None = None,
    ) -> None:
        super().__init__(model, [name for name, _ in model.named_modules()])
        self.optimizer = optimizer
        self.selected = list(selected)
        self._selected = frozenset(selected)
        self.every = every
        self.out = out
        self.on_nonfinite = on_nonfinite
        self.allow_inf = list(allow_inf)
        self.steps = 0
        self.origins: list[Origin] = []
        self.flags: list[Flag] = []
        self._tensorboard = tensorboard
        self._probe = probe
        self._probe_drawn = -1
        self._scalars = ScalarBatch()
        self._tracker = (
            OriginTracker(self._scalars, [_display(n) for n in allow_inf])
            if on_nonfinite != "off"
            else None
        )
        self._writer: LogWriter | None = None
        self._names: dict[int, str] = {}
        self._open: dict[str, list[int]] = {}  # module -> stack of call indices in the tracker
        self._step_calls: dict[str, int] = {}
        self._layers: dict[str, dict[str, Any]] = {}
        self._histograms: dict[str, list[int]] = {}
        self._pre_clip: dict[str, int] = {}
        self._post_clip: dict[str, int] = {}
        self._before: list[torch.Tensor] = []
        self._update: dict[str, tuple[int, int, int]] = {}
        self._active = False  # a training forward ran in this step
        self._opt_stepped = False
        self._manual = False  # the loop calls w.step()
        self._warned = False
        self._last_origin: dict[str, str] = {}
        self._flagger: Any = None
        self.log_path = out / "watch.jsonl"
        self._param_order: list[str] = []

    @property
    def recording(self) -> bool:
        """Whether the current step's statistics are recorded (every ``every`` steps)."""
        return self.every > 0 and self.steps % self.every == 0

    # Entering and leaving.
    def __enter__(self) -> Watch:
        from actviz.monitor.flags import FlagTracker

        self._flagger = FlagTracker()
        self._writer = LogWriter(self.out)
        try:
            super().__enter__()
            self._param_order = list(self._named_parameters())
            self._hook_parameters()
            self._writer.write(self._start_record_line())
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        exc_type, exc = exc_info[0], exc_info[1]
        try:
            if exc_type is None and self._active:
                self._finish_step(None)
        finally:
            try:
                if self._writer is not None:
                    self._writer.write(
                        {
                            "kind": "end",
                            "steps": self.steps,
                            "time": time.time(),
                            "error": None if exc_type is None else repr(exc),
                        }
                    )
            finally:
                self._close()

    def _close(self) -> None:
        super()._close()
        if self._tracker is not None:
            self._tracker.reset()
        self._before.clear()
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._probe is not None:
            self._probe.close()
        if self._writer is not None:
            self._writer.close()

    def step(self, loss: Any = None) -> None:
        """End the current step: read its numbers (one transfer), write its record when it is
        a recorded one, and name a non-finite origin if one appeared.

        Args:
            loss: The step's loss (a tensor or a number), recorded beside the statistics.

        Raises:
            NonFiniteError: With ``on_nonfinite="raise"``, when a NaN or Inf appeared.
        """
        self._manual = True
        self._finish_step(loss)

    # Registration.
    def _register(self, name: str, module: nn.Module) -> None:
        shown = _display(name)
        self._names[id(module)] = shown
        self._add_pre_hook(module, lambda m, args: self._on_pre(shown, m, args))
        self._add_forward_hook(module, lambda m, args, out: self._on_forward(shown, m, out))

    def _hook_parameters(self) -> None:
        params = self._named_parameters()
        for name, param in params.items():
            if param.requires_grad:
                hook = self._pre_clip_hook(name)
                # torch leaves this one unannotated.
                self._keep(param.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]
        if self.optimizer is not None:
            self._keep(self.optimizer.register_step_pre_hook(self._on_optimizer_pre))
            self._keep(self.optimizer.register_step_post_hook(self._on_optimizer_post))

    def _named_parameters(self) -> dict[str, torch.nn.Parameter]:
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
        names = {id(p): n for n, p in self._named_parameters().items()}
        return [
            (names[id(p)], p)
            for group in self.optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]

    # Hooks.
    def _start_record(self) -> None:
        """A forward of the model starts: with no ``w.step()`` in the loop, the step before
        ends here once the optimizer stepped (or at once, with no optimizer)."""
        import torch

        if not torch.is_grad_enabled():
            return
        if self._active and not self._manual and (self.optimizer is None or self._opt_stepped):
            self._finish_step(None)
        self._calls = {}

    def _on_pre(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        self._active = True
        call = self._step_calls.get(name, 0) + 1
        self._step_calls[name] = call
        if self._tracker is not None:
            self._open.setdefault(name, []).append(self._tracker.begin(name, module, args, call))

    def _on_forward(self, name: str, module: nn.Module, output: object) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        slots: list[int] = []
        if self._tracker is not None:
            stack = self._open.get(name)
            if stack:
                slots = self._tracker.end(stack.pop(), name, output)
        if name in self._selected and self.recording:
            key = call_key(name, self._step_calls.get(name, 1))
            sums = [self._tracker.slot_sum(s) for s in slots] if self._tracker else []
            self._summarise(key, output, sums)

    def _summarise(self, key: str, output: object, sums: list[int]) -> None:
        """Queue the statistics of each floating-point tensor of a selected layer's output:
        sum (the non-finite watch's, when it has one), norm, min, max, non-zero count."""
        import torch

        add, count = self._scalars.add, self._scalars.add_count
        tensors = [(s, t) for s, t in tensor_items(output) if t.is_floating_point()]
        tensors = [(s, t) for s, t in tensors if t.numel() > 0]
        for position, (suffix, tensor) in enumerate(tensors):
            with torch.no_grad():
                x = tensor.detach()
                entry: dict[str, Any] = {
                    "n": x.numel(),
                    "shape": list(x.shape),
                    "sum": (
                        sums[position]
                        if len(sums) == len(tensors)
                        else add(x.sum(dtype=torch.float32))
                    ),
                    "l2": add(torch.linalg.vector_norm(x, dtype=torch.float32)),
                    "min": add(x.amin()),
                    "max": add(x.amax()),
                    "nonzero": count(torch.count_nonzero(x)),
                    # Counted only when the sum says there is a NaN or Inf (rarely): no pass
                    # over every output for counts that are almost always zero.
                    "tensor": x,
                }
                if self._tensorboard is not None:
                    from actviz.monitor.tensorboard import histogram_counts

                    entry["hist"] = self._scalars.add_counts(histogram_counts(x))
            self._layers[key + suffix] = entry
            if tensor.requires_grad:
                self._add_tensor_hook(tensor, self._grad_norm_hook(entry))

    def _grad_norm_hook(self, entry: dict[str, Any]) -> Any:
        def hook(grad: torch.Tensor) -> None:
            import torch

            with torch.no_grad():
                entry["grad"] = self._scalars.add(
                    torch.linalg.vector_norm(grad.detach(), dtype=torch.float32)
                )

        return hook

    def _pre_clip_hook(self, name: str) -> Any:
        def hook(param: torch.Tensor) -> None:
            import torch

            if self.recording and param.grad is not None:
                with torch.no_grad():
                    norm = torch.linalg.vector_norm(param.grad.detach(), dtype=torch.float32)
                self._pre_clip[name] = self._scalars.add(norm)

        return hook

    def _on_optimizer_pre(self, *_: Any) -> None:
        import torch

        if not self.recording:
            return
        pairs = self._optimizer_params()
        if not pairs:
            return
        with torch.no_grad():
            norms = torch._foreach_norm([p.grad for _, p in pairs])  # type: ignore[misc]
            self._before = [_sample(p).clone() for _, p in pairs]
        for (name, _param), norm in zip(pairs, norms, strict=True):
            self._post_clip[name] = self._scalars.add(norm.float())

    def _on_optimizer_post(self, *_: Any) -> None:
        import torch

        self._opt_stepped = True
        if not self._manual:
            # Without w.step() the step ends at the next forward, inside the model's call:
            # no place to run the probe, so it runs now, after the update.
            self._draw_probe()
        if not self._before:
            return
        pairs = self._optimizer_params()
        before, self._before = self._before, []
        if len(pairs) != len(before):
            return  # the optimizer's parameters changed inside the step
        with torch.no_grad():
            sampled = [_sample(p) for _, p in pairs]
            deltas = torch._foreach_norm(torch._foreach_sub(sampled, before))
            old = torch._foreach_norm(before)
            new = torch._foreach_norm([p.detach() for _, p in pairs])
        add = self._scalars.add
        for (name, _param), d, o, n in zip(pairs, deltas, old, new, strict=True):
            self._update[name] = (add(d.float()), add(o.float()), add(n.float()))

    # The end of a step.
    def _finish_step(self, loss: Any) -> None:
        import torch

        recording = self.recording
        loss_index: int | float | None = None
        if isinstance(loss, torch.Tensor):
            loss_index = self._scalars.add(loss.detach().float().mean())
        elif isinstance(loss, int | float):
            loss_index = float(loss)
        weights: dict[str, int] = {}
        if recording and self.optimizer is None:
            params = [(n, p) for n, p in self._named_parameters().items() if p.requires_grad]
            if params:
                with torch.no_grad():
                    norms = torch._foreach_norm([p.detach() for _, p in params])
                weights = {
                    n: self._scalars.add(v.float()) for (n, _), v in zip(params, norms, strict=True)
                }
        floats, ints = self._scalars.read()
        origins = self._tracker.blame(floats) if self._tracker is not None else []
        events = []
        for origin in origins:  # a loop, not a comprehension: the warning's stack level
            events.append(self._note(origin))
        step = self.steps
        try:
            if recording:
                loss_value = floats[loss_index] if isinstance(loss_index, int) else loss_index
                record = self._record(step, floats, ints, loss_value, weights, origins)
                self._write(record)
        finally:
            self._reset_step()
        if self._manual:
            self._draw_probe()
        self.steps += 1
        if self.on_nonfinite == "raise" and origins:
            first, event = origins[0], events[0]
            raise NonFiniteError(step, first.module, first.phase, first.value, event)

    def _draw_probe(self) -> None:
        """Draw the probe batch when this step is one of its steps (once a step)."""
        probe, step = self._probe, self.steps
        if probe is None or not probe.due(step) or self._probe_drawn == step:
            return
        self._probe_drawn = step
        files, pictures = probe.draw(step)
        if self._writer is not None and files:
            self._writer.write({"kind": "probe", "step": step, "time": time.time(), "files": files})
        if self._tensorboard is not None:
            for name, rgb in pictures.items():
                self._tensorboard.add_image(f"probe/{name}", rgb, step)

    def _reset_step(self) -> None:
        if self._tracker is not None:
            self._tracker.reset()
        self._drop_tensor_hooks()
        self._open.clear()
        self._step_calls.clear()
        self._layers = {}
        self._pre_clip.clear()
        self._post_clip.clear()
        self._update.clear()
        self._before.clear()
        self._active = False
        self._opt_stepped = False

    def _note(self, origin: Origin) -> str | None:
        """Log an origin the first time it shows (a NaN in the weights shows every step after
        it, from the same place), save the inputs of its module, warn once. Returns the file
        of the inputs."""
        self.origins.append(origin)
        if self._last_origin.get(origin.phase) == origin.module:
            return None
        self._last_origin[origin.phase] = origin.module
        saved = self._save_inputs(origin)
        assert self._writer is not None
        self._writer.write(
            {
                "kind": "nonfinite",
                "step": self.steps,
                "time": time.time(),
                "phase": origin.phase,
                "module": origin.module,
                "module_type": origin.module_type,
                "value": origin.value,
                "inputs_file": saved,
            }
        )
        if not self._warned and self.on_nonfinite == "record":
            self._warned = True
            warnings.warn(
                f"actviz.watch: step {self.steps}: {origin.module} produced the first "
                f"{origin.value} in the {origin.phase} pass; see {self.log_path}",
                RuntimeWarning,
                stacklevel=4,
            )
        return saved

    def _save_inputs(self, origin: Origin) -> str | None:
        """The origin's module inputs (CPU copies), for reproducing it; the file's name
        relative to ``out``."""
        import torch

        from actviz.output import atomic_path, safe_name

        if self._tracker is None or origin.call < 0:
            return None
        args = self._tracker.call_args(origin.call)

        def to_cpu(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.detach().to("cpu", copy=True)
            if isinstance(value, (list, tuple)):
                return (
                    type(value)(to_cpu(v) for v in value)
                    if not hasattr(value, "_fields")
                    else value
                )
            if isinstance(value, dict):
                return {k: to_cpu(v) for k, v in value.items()}
            return value

        name = f"nonfinite/step{self.steps:07d}-{origin.phase}-{safe_name(origin.module)}.pt"
        target = self.out / name
        payload = {
            "step": self.steps,
            "module": origin.module,
            "phase": origin.phase,
            "value": origin.value,
            "args": to_cpu(args),
        }
        with atomic_path(target) as tmp:
            torch.save(payload, tmp)
        return name

    def _record(
        self,
        step: int,
        floats: list[float],
        ints: list[int],
        loss: float | None,
        weights: dict[str, int],
        origins: list[Origin],
    ) -> dict[str, Any]:
        layers = {key: _layer_numbers(entry, floats, ints) for key, entry in self._layers.items()}
        self._histograms = {
            key: ints[entry["hist"]] for key, entry in self._layers.items() if "hist" in entry
        }
        # In the model's order, whatever order the hooks fired in.
        params: dict[str, dict[str, float | None]] = {
            name: {} for name in self._param_order if name in self._pre_clip or name in weights
        }
        for name, index in self._pre_clip.items():
            params.setdefault(name, {})["grad_norm"] = floats[index]
        for name, index in self._post_clip.items():
            params.setdefault(name, {})["grad_norm_clipped"] = floats[index]
        for name, (d, o, n) in self._update.items():
            row = params.setdefault(name, {})
            row["weight_norm"] = floats[n]
            row["update_ratio"] = floats[d] / floats[o] if floats[o] > 0 else None
        for name, index in weights.items():
            params.setdefault(name, {})["weight_norm"] = floats[index]
        record: dict[str, Any] = {
            "kind": "step",
            "step": step,
            "time": time.time(),
            "loss": loss,
            "grad_norm": _total(p.get("grad_norm") for p in params.values()),
            "grad_norm_clipped": (
                _total(p.get("grad_norm_clipped") for p in params.values())
                if self._post_clip
                else None
            ),
            "layers": layers,
            "params": params,
        }
        if origins:
            record["nonfinite"] = [
                {"phase": o.phase, "module": o.module, "value": o.value} for o in origins
            ]
        return record

    def _write(self, record: dict[str, Any]) -> None:
        assert self._writer is not None
        if self._flagger is not None:
            new = self._flagger.update(record)
            self.flags.extend(new)
            if new:
                record["flags"] = [flag.as_dict() for flag in new]
        self._writer.write(record)
        if self._tensorboard is not None:
            self._tensorboard.write(record, self._histograms)

    def _start_record_line(self) -> dict[str, Any]:
        return {
            "kind": "start",
            "time": time.time(),
            "actviz": __version__,
            "model": type(self.model).__name__,
            "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
            "every": self.every,
            "on_nonfinite": self.on_nonfinite,
            "layers": self.selected,
            "params": [n for n, p in self._named_parameters().items() if p.requires_grad],
            "allow_inf": self.allow_inf,
        }


#: Values of a parameter the update ratio is measured on, at most: a copy of every weight at
#: every recorded step would cost as much memory traffic as the step itself.
UPDATE_SAMPLE = 16_384


def _sample(param: torch.Tensor) -> torch.Tensor:
    """The values the update ratio is measured on: all of a small tensor, every k-th value of
    a large one, k the smallest prime that brings the count under :data:`UPDATE_SAMPLE` (a
    prime stride does not keep landing on the same kernel position or channel)."""
    flat = param.detach().reshape(-1)
    n = flat.numel()
    if n <= UPDATE_SAMPLE:
        return flat
    stride = -(-n // UPDATE_SAMPLE)
    while any(stride % d == 0 for d in range(2, int(stride**0.5) + 1)):
        stride += 1
    return flat[::stride]


def _display(name: str) -> str:
    return name or ROOT_NAME


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
        "grad_norm": floats[entry["grad"]] if "grad" in entry else None,
        "shape": entry["shape"],
    }
    if nonfinite == 0 and math.isfinite(floats[entry["sum"]]):
        mean = floats[entry["sum"]] / n
        square = floats[entry["l2"]] ** 2 / n
        row["mean"] = mean
        row["std"] = math.sqrt(max(square - mean * mean, 0.0))
    else:
        row["min"] = row["max"] = None
    return row


def watch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    layers: str | Sequence[str] | None = None,
    every: int = 10,
    out: str | Path = "actviz-watch",
    on_nonfinite: str = "record",
    allow_inf: str | Sequence[str] | None = None,
    tensorboard: bool = False,
    probe: torch.Tensor | None = None,
    probe_every: int | None = None,
) -> Watch:
    """Watch a model while it trains.

    Example:
        >>> with actviz.watch(model, optimizer, layers="conv,linear", out="runs/exp1") as w:
        ...     for x, y in loader:
        ...         loss = loss_fn(model(x), y)
        ...         loss.backward()
        ...         torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        ...         optimizer.step(); optimizer.zero_grad()
        ...         w.step(loss=loss)

    Args:
        model: The model being trained (an eager ``nn.Module``).
        optimizer: Its optimizer: gives the gradient norms after clipping, and the update
            ratios. Without one they are left out.
        layers: Which layers' outputs to summarise (a selector, as ``--layers``); default:
            every leaf module that holds parameters. The non-finite watch covers every module
            whatever this says.
        every: Record statistics every this many steps (0: none, the non-finite watch only).
        out: The folder of the log (``watch.jsonl``), saved inputs, TensorBoard files and
            probe pictures; appended to when it exists.
        on_nonfinite: ``record`` (log the origin, warn once), ``raise`` (stop with
            :class:`~actviz.errors.NonFiniteError`) or ``off`` (no non-finite watch).
        allow_inf: Modules (a selector) whose inputs and outputs may hold ``-inf`` on
            purpose (attention masks).
        tensorboard: Also write the scalars, histograms and probe pictures for TensorBoard
            (needs ``pip install 'actviz[tensorboard]'``).
        probe: A fixed batch drawn as feature-map grids every ``probe_every`` steps (default:
            ``every``), on the scale of the first drawing.
        probe_every: How often the probe is drawn.

    Returns:
        The context manager; use it in a ``with`` block.

    Raises:
        UsageError: For a bad ``every``, ``on_nonfinite`` or ``probe_every``.
        LayerSelectionError: When ``layers`` selects nothing.
    """
    from actviz.hooks import layer_refs
    from actviz.selectors import select_layers

    if not isinstance(every, int) or every < 0:
        raise UsageError(f"every must be a whole number of steps >= 0, not {every!r}")
    if on_nonfinite not in NONFINITE_MODES:
        raise UsageError(
            f"on_nonfinite must be one of {', '.join(NONFINITE_MODES)}, not {on_nonfinite!r}"
        )
    refs = layer_refs(model)
    if layers is None:
        owners = {
            n for n, m in model.named_modules() if next(m.parameters(False), None) is not None
        }
        selected = [r.name for r in refs if r.leaf and r.name in owners]
    else:
        selected = select_layers(refs, layers, model=type(model).__name__)
    allowed = select_layers(refs, allow_inf, model=type(model).__name__) if allow_inf else []
    probe_every = probe_every if probe_every is not None else (every or 10)
    if not isinstance(probe_every, int) or probe_every < 1:
        raise UsageError(f"probe_every must be a whole number of steps >= 1, not {probe_every!r}")
    folder = Path(out)
    board = None
    if tensorboard:
        from actviz.monitor.tensorboard import TensorBoardSink

        board = TensorBoardSink(folder)
    prober = None
    if probe is not None:
        from actviz.monitor.probe import ProbeSink

        prober = ProbeSink(model, probe, selected, folder, probe_every)
    return Watch(
        model,
        optimizer,
        selected,
        every=every,
        out=folder,
        on_nonfinite=on_nonfinite,
        allow_inf=allowed,
        tensorboard=board,
        probe=prober,
    )
