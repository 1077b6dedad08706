"""The probe batch: the same inputs drawn as feature-map grids every few steps, each layer on
the scale of its first drawing, so the report can show how a layer's maps change as it learns.

The probe runs in eval mode (batch-norm statistics untouched, each module's flag restored)
without gradients, with its own recorder; the watch's hooks ignore forwards without
gradients. Only the first image of the batch is drawn, for at most :data:`MAX_LAYERS` layers
spread over the depth of the selection, 16 channels each: pictures every few steps add up.
A later frame's header, and its log record, say its own values' range and the share of them
outside the first drawing's scale (drawn at its ends): a frame that saturates says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.hooks import ActivationRecorder, eval_mode
from actviz.layouts import to_drawable
from actviz.render.legend import fmt_value

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from actviz.render import GridImage

__all__ = ["MAX_LAYERS", "ProbeSink", "spread", "spread_share", "value_spread"]

MAX_LAYERS = 8
_CHANNELS = 16


def spread(names: Sequence[str], count: int) -> list[str]:
    """At most ``count`` of ``names``, evenly spaced, the first and the last included."""
    if len(names) <= count:
        return list(names)
    if count == 1:
        return [names[-1]]
    return [names[round(i * (len(names) - 1) / (count - 1))] for i in range(count)]


class ProbeSink:
    """Draws the probe every ``every`` steps into ``out/probe/<layer>/step<N>.png``."""

    def __init__(
        self,
        model: nn.Module,
        probe: torch.Tensor,
        layers: Sequence[str],
        folder: Path,
        every: int,
    ) -> None:
        self.model = model
        self.probe = probe.detach()
        self.layers = spread(layers, MAX_LAYERS)
        self.folder = folder
        self.every = every
        self._ranges: dict[str, tuple[float, float]] = {}
        #: Per layer drawn last: its values' range, the scale and the share outside it.
        self.ranges: dict[str, dict[str, Any]] = {}

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def draw(self, step: int) -> tuple[dict[str, str], dict[str, Any]]:
        """Run the probe and draw each layer; returns the files (relative to ``out``) and the
        RGB pictures, by layer."""
        import torch

        from actviz.output import safe_name, write_bytes

        device = next((p.device for p in self.model.parameters()), self.probe.device)
        with (
            eval_mode(self.model),
            torch.no_grad(),
            ActivationRecorder(self.model, self.layers, per_image=True) as acts,
        ):
            try:
                self.model(self.probe.to(device))
            except (RuntimeError, TypeError, ValueError) as exc:  # the model refused the batch
                from actviz.errors import UsageError, first_line

                raise UsageError(
                    f"probe of shape {tuple(self.probe.shape)} cannot run through the model: "
                    f"{first_line(exc)}; pass a batch as the model takes it (the channels, "
                    "size and preprocessing of a training batch)"
                ) from exc
        files: dict[str, str] = {}
        pictures: dict[str, Any] = {}
        self.ranges = {}
        for name in self.layers:
            if name not in acts:
                continue
            first = name not in self._ranges
            array = _array(acts[name][0])
            options: dict[str, Any] = {"norm": "layer"}
            seen: dict[str, Any] = {}
            if not first:
                # On the first drawing's scale, so brightness compares across frames; the
                # frame says its own values' range and how many fall outside that scale.
                seen = value_spread(array, self._ranges[name])
                options = {"value_range": self._ranges[name], "notes": [_spread_note(seen)]}
            grid = _draw(array, f"{name} at step {step}", options)
            if grid is None:
                continue  # an output that cannot be drawn (a scalar per image)
            if first:
                self._ranges[name] = (grid.vmin, grid.vmax)
                seen = value_spread(array, self._ranges[name])
            self.ranges[name] = seen
            relative = f"probe/{safe_name(name)}/step{step:07d}.png"
            target = self.folder / relative
            write_bytes(target, grid.to_png(1))
            files[name] = relative
            pictures[name] = grid.to_rgb()
        return files, pictures

    def close(self) -> None:
        self._ranges.clear()


def _array(activation: torch.Tensor) -> np.ndarray:

    return np.asarray(activation.detach().cpu().float().numpy(), dtype=np.float32)


def value_spread(array: np.ndarray, scale: tuple[float, float]) -> dict[str, Any]:
    """What a frame holds against the scale it is drawn on: its finite values' range and
    the share of them outside ``scale`` (drawn at its ends). JSON-safe: None when there is
    no finite value."""

    values = array[np.isfinite(array)]
    if values.size == 0:
        return {"min": None, "max": None, "scale": list(scale), "clipped": None}
    outside = np.count_nonzero((values < scale[0]) | (values > scale[1]))
    return {
        "min": float(values.min()),
        "max": float(values.max()),
        "scale": [float(scale[0]), float(scale[1])],
        "clipped": outside / values.size,
    }


def _spread_note(seen: dict[str, Any]) -> str:

    if seen["min"] is None:
        return "no finite value"
    low, high = seen["scale"]
    return (
        f"values [{fmt_value(seen['min'])}, {fmt_value(seen['max'])}]; "
        f"{spread_share(seen['clipped'])} outside the first drawing's "
        f"[{fmt_value(low)}, {fmt_value(high)}], drawn at its ends"
    )


def spread_share(fraction: float) -> str:
    """A share of values as a percentage that is 0 only when none and 100 only when all."""
    if fraction <= 0:
        return "0%"
    if fraction >= 1:
        return "100%"
    shown = f"{fraction:.0%}"
    if shown == "0%":
        return "<1%"
    return ">99%" if shown == "100%" else shown


def _draw(array: np.ndarray, title: str, options: dict[str, Any]) -> GridImage | None:
    """One image's output as a grid (or a strip, for a vector); None when it cannot be drawn."""
    from actviz.render import render_grid, render_vector

    try:
        drawable = to_drawable(array, None)
        if drawable.kind == "none" or drawable.array is None:
            return None
        if drawable.kind == "vector":
            shared = {k: v for k, v in options.items() if k in ("value_range", "notes")}
            return render_vector(drawable.array, title=title, **shared)
        if drawable.kind == "clip":
            from actviz.render.timestrips import render_time_strips

            shared = {k: v for k, v in options.items() if k in ("value_range", "notes")}
            return render_time_strips(drawable.array, title=title, **shared)
        return render_grid(drawable.array, title=title, max_channels=_CHANNELS, **options)
    except ValueError:
        return None
