"""Where a NaN or Inf first appeared in training: each origin logged once, its module's
inputs saved for reproducing it, and one warning."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from actviz.monitor.log import LogWriter
from actviz.monitor.nonfinite import Origin, OriginTracker

__all__ = ["OriginLog"]


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
        self.origins: list[Origin] = []
        self._last: dict[str, str] = {}
        self._warned = False

    def note(self, origin: Origin, step: int, writer: LogWriter | None) -> str | None:
        """Log an origin the first time it shows (a NaN in the weights shows every step after
        it, from the same place), save the inputs of its module, warn once. Returns the file
        of the inputs.

        Called from the watch's end of a step, itself called from ``w.step()``: the warning
        names the caller of ``w.step()``."""
        self.origins.append(origin)
        if self._last.get(origin.phase) == origin.module:
            return None
        self._last[origin.phase] = origin.module
        saved = self._save_inputs(origin, step)
        assert writer is not None
        writer.write(
            {
                "kind": "nonfinite",
                "step": step,
                "time": time.time(),
                "phase": origin.phase,
                "module": origin.module,
                "module_type": origin.module_type,
                "value": origin.value,
                "inputs_file": saved,
            }
        )
        if not self._warned and self._on_nonfinite == "record":
            self._warned = True
            warnings.warn(
                f"actviz.watch: step {step}: {origin.module} produced the first "
                f"{origin.value} in the {origin.phase} pass; see {self._log_path}",
                RuntimeWarning,
                stacklevel=4,
            )
        return saved

    def _save_inputs(self, origin: Origin, step: int) -> str | None:
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
