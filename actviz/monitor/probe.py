"""The probe batch: the same inputs drawn as feature-map grids every few steps, each layer on
the scale of its first drawing, so the report can show how a layer's maps change as it learns.

The probe runs in eval mode (batch-norm statistics untouched, each module's flag restored)
without gradients, with its own recorder; the watch's hooks ignore forwards without
gradients. Only the first image of the batch is drawn, for at most :data:`MAX_LAYERS` layers
spread over the depth of the selection, 16 channels each: pictures every few steps add up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.render import GridImage

__all__ = ["MAX_LAYERS", "ProbeSink", "spread"]

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

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def draw(self, step: int) -> tuple[dict[str, str], dict[str, Any]]:
        """Run the probe and draw each layer; returns the files (relative to ``out``) and the
        RGB pictures, by layer."""
        import torch

        from actviz.hooks import ActivationRecorder, eval_mode
        from actviz.output import safe_name, write_bytes

        device = next((p.device for p in self.model.parameters()), self.probe.device)
        with (
            eval_mode(self.model),
            torch.no_grad(),
            ActivationRecorder(self.model, self.layers) as acts,
        ):
            self.model(self.probe.to(device))
        files: dict[str, str] = {}
        pictures: dict[str, Any] = {}
        for name in self.layers:
            if name not in acts:
                continue
            first = name not in self._ranges
            options: dict[str, Any] = (
                {"norm": "layer"} if first else {"value_range": self._ranges[name]}
            )
            grid = _draw(acts[name][0], f"{name} at step {step}", options)
            if grid is None:
                continue  # an output that cannot be drawn (a scalar per image)
            if first:
                self._ranges[name] = (grid.vmin, grid.vmax)
            relative = f"probe/{safe_name(name)}/step{step:07d}.png"
            target = self.folder / relative
            write_bytes(target, grid.to_png(1))
            files[name] = relative
            pictures[name] = grid.to_rgb()
        return files, pictures

    def close(self) -> None:
        self._ranges.clear()


def _draw(activation: torch.Tensor, title: str, options: dict[str, Any]) -> GridImage | None:
    """One image's output as a grid (or a strip, for a vector); None when it cannot be drawn."""
    import numpy as np

    from actviz.layouts import to_drawable
    from actviz.render import render_grid, render_vector

    array = np.asarray(activation.detach().cpu().float().numpy(), dtype=np.float32)
    try:
        drawable = to_drawable(array, None)
        if drawable.kind == "none" or drawable.array is None:
            return None
        if drawable.kind == "vector":
            return render_vector(drawable.array, title=title)
        return render_grid(drawable.array, title=title, max_channels=_CHANNELS, **options)
    except ValueError:
        return None
