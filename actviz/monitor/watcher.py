"""The :class:`Watch` context manager: one :class:`~actviz.hooks.HookSession` on every module
of a model in training, and the end of each step.

It holds the hooks on the modules (the non-finite watch on every call, the summaries of the
selected layers) and ends each step: one read of the step's numbers, its record, the
origins of a NaN or Inf, the probe pictures. The parameters' numbers are taken by
:class:`~actviz.monitor.params.ParamWatch`, the layers' by
:class:`~actviz.monitor.summaries.LayerSummaries`, the origins are logged by
:class:`~actviz.monitor.origins.OriginLog`."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz._version import __version__
from actviz.cards import LiveView, LogFollower, training_card
from actviz.errors import NonFiniteError, UsageError
from actviz.hooks import HookSession, call_key
from actviz.monitor.flags import FlagTracker
from actviz.monitor.log import LogWriter
from actviz.monitor.nonfinite import LOSS_NAME, ROOT_NAME, Origin, OriginTracker
from actviz.monitor.origins import OriginLog, loss_message, nonfinite_kind
from actviz.monitor.params import ParamWatch
from actviz.monitor.reduce import squared_norm
from actviz.monitor.scalars import ScalarBatch
from actviz.monitor.summaries import LayerSummaries, step_record

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.monitor.flags import Flag
    from actviz.monitor.probe import ProbeSink
    from actviz.monitor.tensorboard import TensorBoardSink

__all__ = ["Watch"]


class Watch(HookSession):
    """The context manager :func:`~actviz.monitor.watch.watch` returns; see there. Attributes
    useful in the loop:

    Attributes:
        steps: Steps finished so far.
        origins: Every non-finite origin, earliest first: one per place, with the first step
            it appeared at and the number of steps it appeared at.
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
        import torch

        super().__init__(model, [name for name, _ in model.named_modules()])
        self._grad_enabled = torch.is_grad_enabled  # called twice per module call
        self.optimizer = optimizer
        self.selected = list(selected)
        self._selected = frozenset(selected)
        self.every = every
        self.out = out
        self.on_nonfinite = on_nonfinite
        self.allow_inf = list(allow_inf)
        self.steps = 0
        self.flags: list[Flag] = []
        self.log_path = out / "watch.jsonl"
        self._tensorboard = tensorboard
        self._probe = probe
        self._probe_drawn = -1
        self._scalars = ScalarBatch()
        self._tracker = (
            OriginTracker(self._scalars, [_display(n) for n in allow_inf])
            if on_nonfinite != "off"
            else None
        )
        self._origins = OriginLog(self._tracker, out, on_nonfinite, self.log_path)
        self._params = ParamWatch(model, optimizer, self._scalars, lambda: self.recording)
        self._summaries = LayerSummaries(self._scalars, histograms=tensorboard is not None)
        self._writer: LogWriter | None = None
        self._open: dict[str, list[int]] = {}  # module -> stack of call indices in the tracker
        self._step_calls: dict[str, int] = {}
        self._histograms: dict[str, list[int]] = {}
        self._active = False  # a training forward ran in this step
        self._opt_stepped = False
        self._manual = False  # the loop calls w.step()
        self._flagger: Any = None
        self._live: Any = None  # a notebook's live view (actviz.cards.LiveView)

    @property
    def recording(self) -> bool:
        """Whether the current step's statistics are recorded (every ``every`` steps)."""
        return self.every > 0 and self.steps % self.every == 0

    @property
    def origins(self) -> list[Origin]:
        """Every non-finite origin, earliest first: one per place (phase and module), with the
        first step it appeared at and the number of steps it appeared at."""
        return self._origins.origins

    # Entering and leaving.
    def __enter__(self) -> Watch:

        self._flagger = FlagTracker()
        self._writer = LogWriter(self.out)
        try:
            super().__enter__()
            self._params.hook(self._keep, self._on_optimizer_post)
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
                if self._live is not None:
                    self._live.refresh()

    def _close(self) -> None:
        super()._close()
        if self._tracker is not None:
            self._tracker.reset()
        self._params.release()
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
        if self._writer is None:
            raise UsageError(
                "w.step() ends a step of a watched loop: call it inside "
                "`with actviz.watch(model, optimizer) as w:`"
            )
        self._manual = True
        self._finish_step(loss)

    # In a notebook.
    def live(self, every: int = 10) -> Any:
        """Show the latest per-layer statistics and flags in the cell's output, redrawn every
        ``every`` steps while the loop runs and once at the end of the block (a redraw reads
        only the log's new lines; the other steps pay one test). Returns the view
        (:class:`actviz.cards.LiveView`); ``view.refresh()`` redraws at once."""

        self._live = LiveView(self.log_path, every, steps=lambda: self.steps).show()
        return self._live

    def __repr__(self) -> str:

        return training_card(LogFollower(self.log_path).read(), steps=self.steps).text()

    def _repr_html_(self) -> str:

        return training_card(LogFollower(self.log_path).read(), steps=self.steps).html()

    # Hooks.
    def _register(self, name: str, module: nn.Module) -> None:
        shown = _display(name)
        # Partials, not lambdas: one Python frame less on every module call.
        self._add_pre_hook(module, functools.partial(self._on_pre, shown))
        self._add_forward_hook(module, functools.partial(self._on_forward, shown))

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
        if not self._grad_enabled():
            return
        self._active = True
        call = self._step_calls.get(name, 0) + 1
        self._step_calls[name] = call
        if self._tracker is not None:
            self._open.setdefault(name, []).append(self._tracker.begin(name, module, args, call))

    def _on_forward(
        self, name: str, module: nn.Module, args: tuple[Any, ...], output: object
    ) -> None:
        if not self._grad_enabled():
            return
        slots: list[int] = []
        if self._tracker is not None:
            stack = self._open.get(name)
            if stack:
                slots = self._tracker.end(stack.pop(), name, output)
        if name in self._selected and self.recording:
            key = call_key(name, self._step_calls.get(name, 1))
            tracker = self._tracker
            sums = [tracker.slot_sum(s) for s in slots] if tracker is not None else []

            def grad_norm(position: int, tensor: torch.Tensor, to: Callable[[int], None]) -> None:
                # The tracker's hook on the same tensor takes it when there is one.
                if tracker is None or position < 0 or not tracker.grad_norm(slots[position], to):
                    self._add_tensor_hook(tensor, self._grad_norm_hook(to))

            self._summaries.add(key, output, sums, grad_norm)

    def _grad_norm_hook(self, to: Callable[[int], None]) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            to(self._scalars.add(squared_norm(grad)))

        return hook

    def _on_optimizer_post(self, *_: Any) -> None:
        self._opt_stepped = True
        if not self._manual:
            # Without w.step() the step ends at the next forward, inside the model's call:
            # no place to run the probe, so it runs now, after the update.
            self._draw_probe()
        self._params.after_update()

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
            weights = self._params.weight_norms()
        floats, ints = self._scalars.read()
        loss_value = floats[loss_index] if isinstance(loss_index, int) else loss_index
        step = self.steps
        origins, loss_note = self._blame(floats, loss_value, step)
        events = []
        for origin in origins:  # a loop, not a comprehension: the warning's stack level
            message = loss_note["message"] if loss_note and origin.module == LOSS_NAME else None
            events.append(self._origins.note(origin, step, self._writer, message))
        try:
            if recording:
                layers, self._histograms = self._summaries.numbers(floats, ints)
                params = self._params.numbers(floats, weights)
                record = step_record(
                    step, loss_value, layers, params, clipped=self._params.clipped, origins=origins
                )
                if loss_note is not None:
                    record["loss_nonfinite"] = loss_note
                self._write(record)
        finally:
            self._reset_step()
        if self._manual:
            self._draw_probe()
        self.steps += 1
        if self._live is not None:
            self._live.tick(self.steps)
        if self.on_nonfinite == "raise" and origins:
            first, event = origins[0], events[0]
            said = loss_note["message"] if loss_note and first.module == LOSS_NAME else None
            raise NonFiniteError(
                step,
                first.module,
                first.phase,
                first.value,
                event,
                module_type=first.module_type,
                message=said,
            )

    def _blame(
        self, floats: list[float], loss: float | None, step: int
    ) -> tuple[list[Origin], dict[str, str] | None]:
        """The step's non-finite origins, and a note on its loss when that is not finite.

        A loss that is NaN or Inf while every module's output was finite was made by the loss
        computation (a log of a negative number): it is the step's origin, named ``(loss)``,
        ahead of any gradient it spoiled."""
        origins = self._tracker.blame(floats) if self._tracker is not None else []
        kind = nonfinite_kind(loss)
        if kind is None:
            return origins, None
        if self._tracker is not None and not any(o.phase == "forward" for o in origins):
            origins = [Origin("forward", LOSS_NAME, "", "NaN" if kind == "NaN" else "Inf")]
        message = loss_message(kind, step, origins, watched=self._tracker is not None)
        return origins, {"value": kind, "message": message}

    def _draw_probe(self) -> None:
        """Draw the probe batch when this step is one of its steps (once a step)."""
        probe, step = self._probe, self.steps
        if probe is None or not probe.due(step) or self._probe_drawn == step:
            return
        self._probe_drawn = step
        files, pictures = probe.draw(step)
        if self._writer is not None and files:
            ranges = {name: probe.ranges[name] for name in files if name in probe.ranges}
            self._writer.write(
                {
                    "kind": "probe",
                    "step": step,
                    "time": time.time(),
                    "files": files,
                    "ranges": ranges,
                }
            )
        if self._tensorboard is not None:
            for name, rgb in pictures.items():
                self._tensorboard.add_image(f"probe/{name}", rgb, step)

    def _reset_step(self) -> None:
        if self._tracker is not None:
            self._tracker.reset()
        self._drop_tensor_hooks()
        self._open.clear()
        self._step_calls.clear()
        self._summaries.clear()
        self._params.clear()
        self._active = False
        self._opt_stepped = False

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
            "params": [n for n, p in self._params.named().items() if p.requires_grad],
            "allow_inf": self.allow_inf,
        }


def _display(name: str) -> str:
    return name or ROOT_NAME
