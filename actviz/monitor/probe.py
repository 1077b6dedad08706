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
        from actviz.output import safe_name, write_png
        from actviz.render import render_activation

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
            try:
                grid = render_activation(
                    acts[name][0], title=f"{name} at step {step}", max_channels=_CHANNELS, **options
                )
            except ValueError:
                continue  # an output that cannot be drawn (a scalar per image)
            if first:
                self._ranges[name] = (grid.vmin, grid.vmax)
            relative = f"probe/{safe_name(name)}/step{step:07d}.png"
            target = self.folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            write_png(target, grid.to_pil())
            files[name] = relative
            pictures[name] = grid.to_rgb()
        return files, pictures

    def close(self) -> None:
        self._ranges.clear()
