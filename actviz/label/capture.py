"""The forward hooks of ``label``: each selected output read as maps (the layouts top-images
plans: ViT tokens, channels-last blocks, vectors), a dictionary's features where one is given,
and handed to a consumer inside the hook, where the output lives. The consumer reduces the maps
at once (a score per image and unit, a mask's counts); nothing holds a map past its hook, so
memory grows with images times units, never with the maps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from actviz.hooks import HookSession, activations
from actviz.top_images.plan import LayerPlan, as_maps
from actviz.top_images.scoring import fit_to_plan
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Consumer", "UnitRecorder"]

Consumer = Callable[[str, "torch.Tensor", "torch.Tensor | None"], None]
"""``(capture key, maps (B, U, H, W) float32, means (B, U) or None)``: ``means`` are the maps'
means before they were pooled to the planned size (an image of another aspect ratio)."""


class UnitRecorder(HookSession):
    """Hand each planned output of every forward to ``consume`` as ``(B, U, H, W)`` maps.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules to hook.
        plans: Capture key -> its plan (:func:`actviz.top_images.plan.plan_layers`).
        consume: Called in the hook for each planned output.
        transforms: Capture key -> what its output becomes first (a sparse dictionary's
            feature maps); None from it: an output it cannot transform.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: Sequence[str],
        plans: Mapping[str, LayerPlan],
        consume: Consumer,
        transforms: Mapping[str, Callable[[torch.Tensor], torch.Tensor | None]] | None = None,
    ) -> None:
        super().__init__(model, layers)
        self.plans = plans
        self.consume = consume
        self.transforms = transforms or {}
        self.unfit: dict[str, tuple[int, ...]] = {}
        """Capture key -> the per-image shape of an output that could not be read as its
        plan's maps (its images are not scored)."""
        self.seen: set[str] = set()
        """The capture keys consumed in the latest forward."""
        self._rows = ImageRows(model)

    def _start_record(self) -> None:
        super()._start_record()
        self.unfit = {}
        self.seen = set()

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            for element, raw in activations(output):
                full = key + element
                plan = self.plans.get(full)
                tensor, _ = self._rows.split(name, raw)
                if plan is None or tensor is None:
                    continue
                transform = self.transforms.get(full)
                if transform is not None:
                    given, tensor = tuple(tensor.shape[1:]), transform(tensor)
                    if tensor is None:
                        self.unfit[full] = given
                        continue
                self._consume(full, tensor, plan)

        self._add_forward_hook(module, hook)

    def _consume(self, key: str, tensor: torch.Tensor, plan: LayerPlan) -> None:
        shape = tuple(tensor.shape[1:])
        if shape == plan.shape:
            self.consume(key, as_maps(tensor.detach(), plan).float(), None)
            self.seen.add(key)
            return
        fitted = fit_to_plan(tensor, plan)
        if fitted is None:
            self.unfit[key] = shape
            return
        pooled, means = fitted
        self.consume(key, as_maps(pooled, plan).float(), means.float())
        self.seen.add(key)
