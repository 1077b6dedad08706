"""Where a NaN or Inf first appeared in training: each origin logged once, its module's
inputs saved for reproducing it, and one warning."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from actviz.monitor.log import LogWriter
from actviz.monitor.nonfinite import LOSS_NAME, Origin, OriginTracker
from actviz.output import atomic_path, safe_name

__all__ = ["OriginLog", "loss_message", "nonfinite_kind"]


class OriginLog:
    """The non-finite origins of a watch.

    Args:
        tracker: The non-finite watch (None when it is off: no inputs are saved).
        out: The watch's folder; saved inputs go under ``nonfinite/``.
        on_nonfinite: ``record`` warns once at the first origin.
        log_path: The log, named in the warning.
    """

    def __init__(
        self, tracker: OriginTracker | None, out: Path, on_nonfinite: str, log_path: Path
    ) -> None:
        self._tracker = tracker
        self._out = out
        self._on_nonfinite = on_nonfinite
        self._log_path = log_path
        self.origins: list[Origin] = []  # one per (phase, module), by first step
        self._seen: dict[tuple[str, str], Origin] = {}
        self._last: dict[str, str] = {}
        self._warned = False

    def note(
        self, origin: Origin, step: int, writer: LogWriter | None, message: str | None = None
    ) -> str | None:
        """Log an origin the first time it shows (a NaN in the weights shows every step after
        it, from the same place: one entry of :attr:`origins`, its count raised), save the
        inputs of its module, warn once. ``message`` says it in a sentence of its own (a
        non-finite loss). Returns the file of the inputs.

        Called from the watch's end of a step, itself called from ``w.step()``: the warning
        names the caller of ``w.step()``."""
        known = self._seen.get((origin.phase, origin.module))
        if known is None:
            known = replace(origin, step=step, count=0)
            self._seen[(origin.phase, origin.module)] = known
            self.origins.append(known)
        known.count += 1
        if self._last.get(origin.phase) == origin.module:
            return None
        self._last[origin.phase] = origin.module
        saved = self._save_inputs(origin, step)
        assert writer is not None
        record: dict[str, Any] = {
            "kind": "nonfinite",
            "step": step,
            "time": time.time(),
            "phase": origin.phase,
            "module": origin.module,
            "module_type": origin.module_type,
            "value": origin.value,
            "inputs_file": saved,
        }
        if message is not None:
            record["message"] = message
        writer.write(record)
        if not self._warned and self._on_nonfinite == "record":
            self._warned = True
            kind = f" ({origin.module_type})" if origin.module_type else ""
            said = message or (
                f"step {step}: {origin.module}{kind} produced the first {origin.value} in the "
                f"{origin.phase} pass"
            )
            warnings.warn(
                f"actviz.watch: {said}; see {self._log_path}",
                RuntimeWarning,
                stacklevel=4,
            )
        return saved

    def _save_inputs(self, origin: Origin, step: int) -> str | None:
        """The origin's module inputs (CPU copies), for reproducing it; the file's name
        relative to ``out``."""
        import torch

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

        name = f"nonfinite/step{step:07d}-{origin.phase}-{safe_name(origin.module)}.pt"
        target = self._out / name
        payload = {
            "step": step,
            "module": origin.module,
            "phase": origin.phase,
            "value": origin.value,
            "args": to_cpu(args),
        }
        with atomic_path(target) as tmp:
            torch.save(payload, tmp)
        return name


def nonfinite_kind(value: float | None) -> str | None:
    """``NaN``, ``Inf`` or ``-Inf`` for a non-finite number; None for a finite one or None."""
    if value is None or math.isfinite(value):
        return None
    if math.isnan(value):
        return "NaN"
    return "Inf" if value > 0 else "-Inf"


def loss_message(kind: str, step: int, origins: list[Origin], *, watched: bool) -> str:
    """One sentence on a non-finite loss: which module's output made it, or, every module's
    output being finite, the loss computation itself."""
    head = f"the loss was {kind} at step {step}"
    made = next((o for o in origins if o.phase == "forward" and o.module != LOSS_NAME), None)
    if made is not None:
        where = f" ({made.module_type})" if made.module_type else ""
        return f"{head}; {made.module}{where} made the first {made.value} in the forward pass"
    if not watched:
        return f"{head}; the non-finite watch was off, so where it came from is not known"
    return f"{head}; every module's output was finite, so the loss computation made it"
