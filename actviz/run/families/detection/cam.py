"""Class-activation maps of a detector, per image: EigenCAM over the FPN levels (no gradient,
no target: what the features respond to most), and Grad-CAM of one detection (the gradient of
its score), as pytorch-grad-cam's detection tutorial computes them.

Both read the FPN's levels (or, without an FPN, the backbone's last map) the way that tutorial
does: every level resized to one grid and their channels put side by side, so the map sees
every scale; EigenCAM takes the levels' absolute values first, as the tutorial does. Maps are
cropped to the cells that see the image (the model pads its input) before they are drawn over
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.gradients.cam import grad_cam
from actviz.gradients.eigen import eigen_cam
from actviz.hooks.session import HookSession
from actviz.windows import kept_cells

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.hooks import Capture
    from actviz.run.families.base import Batch
    from actviz.run.families.detection.probe import DetectionProbe, Found

__all__ = [
    "DetectionCams",
    "GradientTap",
    "detection_cams",
    "eigen_maps",
    "grad_cam_maps",
]


@dataclass(frozen=True)
class DetectionCams:
    """One image's maps over what the model saw, each ``(h, w)`` in 0..1.

    Attributes:
        eigen: EigenCAM over the FPN levels; None without a 4-D map to read.
        grad: Grad-CAM of the detection ``rank``; None without a detection.
        rank: Which detection (0: the highest score) ``grad`` explains.
        source: What the maps were computed from (``backbone.fpn, 5 levels``).
    """

    eigen: Any
    grad: Any
    rank: int
    source: str


def detection_cams(
    module: nn.Module,
    family_call: Any,
    batch: Batch,
    found: Sequence[Found],
    rank: int,
    probe: DetectionProbe,
) -> list[DetectionCams]:
    """Each image's maps of one batch: EigenCAM from the captures, Grad-CAM of detection
    ``rank`` from a second forward with gradients, during which ``batch.paused()`` keeps the
    run's recorder from replacing its captures."""
    eigen = eigen_maps(batch.captures)
    with batch.paused():
        grads = grad_cam_maps(module, family_call, batch.x, found, rank, probe)
    source = eigen[1] if eigen is not None else "backbone.fpn"
    return [
        DetectionCams(eigen[0][i] if eigen is not None else None, grads[i], rank, source)
        for i in range(len(found))
    ]


def _levels(captures: Sequence[Capture]) -> list[Capture]:
    """The FPN's levels among the captures (SSD: its backbone's maps, a dict as well), else
    the last 4-D backbone map."""
    for module in ("backbone.fpn", "backbone"):
        levels = [
            c
            for c in captures
            if c.module == module and c.tensor is not None and c.tensor.ndim == 4
        ]
        if levels:
            return levels
    maps = [
        c
        for c in captures
        if c.module.startswith("backbone") and c.tensor is not None and c.tensor.ndim == 4
    ]
    return maps[-1:]


def _side_by_side(levels: Sequence[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
    """Every level resized to ``size`` (bilinear) and their channels concatenated."""
    import torch
    from torch.nn import functional as F

    return torch.cat(
        [F.interpolate(t.float(), size=size, mode="bilinear", align_corners=False) for t in levels],
        dim=1,
    )


def eigen_maps(captures: Sequence[Capture]) -> tuple[Any, str] | None:
    """EigenCAM of every image of the batch from its (cropped) FPN captures: ``(B, h, w)``
    maps at the finest level's size, and what they were computed from; None without a map."""
    import torch

    levels = _levels(captures)
    if not levels:
        return None
    tensors = [c.tensor for c in levels if c.tensor is not None]
    size = (int(tensors[0].shape[-2]), int(tensors[0].shape[-1]))
    stacked = _side_by_side([torch.abs(t) for t in tensors], size)
    module = levels[0].module
    what = f"{module}, {len(levels)} level{'s' if len(levels) != 1 else ''}"
    return eigen_cam(stacked), what


class GradientTap(HookSession):
    """Keeps the output of the detector's FPN (or backbone) from a forward with gradients on,
    each level's gradient to be read after the backward pass."""

    def __init__(self, model: nn.Module, layer: str) -> None:
        super().__init__(model, [layer])
        self.levels: dict[str, torch.Tensor] = {}

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: Any) -> None:
            import torch

            items = output.items() if isinstance(output, dict) else [("0", output)]
            self.levels = {}
            for key, value in items:
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    value.retain_grad()
                    self.levels[str(key)] = value

        self._add_forward_hook(module, hook)


def grad_cam_maps(
    module: nn.Module,
    family_call: Any,
    x: torch.Tensor,
    found: Sequence[Found],
    rank: int,
    probe: DetectionProbe,
) -> list[Any]:
    """Grad-CAM of detection ``rank`` of each image (None for an image without it): the
    gradient of its score with respect to the FPN levels, side by side at the finest level's
    size, cropped to the cells that see the image."""
    import torch

    layer = "backbone.fpn" if "backbone.fpn" in dict(module.named_modules()) else "backbone"
    wanted = [i for i, f in enumerate(found) if rank < len(f.scores)]
    if not wanted:
        return [None] * len(found)
    # The batch forward yields inside inference mode; this pass needs autograd.
    with torch.inference_mode(False), torch.enable_grad(), GradientTap(module, layer) as tap:
        x = x.clone()  # a tensor made in inference mode cannot enter autograd
        outputs = family_call(module, x)
        score = sum(outputs[i]["scores"][rank] for i in wanted)
        module.zero_grad(set_to_none=True)
        score.backward()
        levels = [t for t in tap.levels.values() if t.grad is not None and t.ndim == 4]
        if not levels:
            return [None] * len(found)
        size = (int(levels[0].shape[-2]), int(levels[0].shape[-1]))
        acts = _side_by_side([t.detach() for t in levels], size)
        grads = _side_by_side([t.grad for t in levels if t.grad is not None], size)
    module.zero_grad(set_to_none=True)
    keep_h, keep_w = _kept(size, probe)
    maps = grad_cam(acts[..., :keep_h, :keep_w], grads[..., :keep_h, :keep_w]).cpu()
    return [maps[i] if i in wanted else None for i in range(len(found))]


def _kept(size: tuple[int, int], probe: DetectionProbe) -> tuple[int, int]:
    """The cells of a ``size`` map on the padded grid that see the image."""

    if probe.padded is None or not probe.image_sizes:
        return size
    valid = (max(h for h, _ in probe.image_sizes), max(w for _, w in probe.image_sizes))
    return kept_cells(size, valid, probe.padded)
