"""Grad-CAM: where in the image a layer found the evidence for a class. ViT tokens and
channels-last (Swin) blocks are laid out like a convolution's output (:func:`to_nchw`), so every
architecture goes through the same formula."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.errors import ModelError, UsageError
from actviz.gradients.nchw import CamLayout, to_nchw
from actviz.gradients.recorder import GradientRecorder
from actviz.gradients.registry import DEFAULT_CAM, method_cams

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from torch import nn

__all__ = ["CamLayout", "ClassCam", "class_cams", "grad_cam", "to_nchw"]


@dataclass(frozen=True)
class ClassCam:
    """The Grad-CAM of one class for one image.

    Attributes:
        index: The class index.
        label: The class name, when the model has names.
        probability: The class's softmax probability for the image.
        cam: ``(h, w)`` map in ``[0, 1]``.
        note: Why the map is all zero, when it is and the reason is known.
        method: The method that drew it (:data:`actviz.gradients.registry.MAP_METHODS`).
    """

    index: int
    label: str | None
    probability: float
    cam: torch.Tensor
    note: str | None = None
    method: str = DEFAULT_CAM

    @property
    def name(self) -> str:
        """``"tabby (281)"``, or ``"class 281"`` without a name."""
        return f"{self.label} ({self.index})" if self.label is not None else f"class {self.index}"

    @property
    def caption(self) -> str:
        """``"tabby (281) 42.0%"`` (or ``"class 281 42.0%"`` without a name): a panel label."""
        return f"{self.name} {self.probability:.1%}"


def class_cams(
    model: nn.Module,
    x: torch.Tensor,
    layer: str,
    *,
    k: int = 3,
    categories: Sequence[str] | None = None,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
    method: str = DEFAULT_CAM,
) -> list[list[ClassCam]]:
    """Grad-CAM (or ``method``'s) maps of each image's ``k`` most likely classes, from one
    forward.

    One forward, then ``k`` backward passes over the same graph (rank 1, rank 2, ...);
    Score-CAM's masked forwards follow (:func:`actviz.gradients.methods.score_cam`).

    Args:
        model: A classifier returning ``(B, K)`` logits.
        x: ``(B, C, H, W)`` input batch on the model's device.
        layer: The module whose output the maps are computed from (e.g. ``layer4``).
        k: Classes per image.
        categories: Class names for the labels.
        layout, grid, prefix_tokens: How the layer's output is laid out (:func:`to_nchw`).

    Returns:
        Per image, ``k`` maps from the most likely class down, each ``(h, w)`` in ``[0, 1]``.

    Raises:
        UsageError: If ``k`` is not between 1 and the number of classes.
        ModelError: If the layer's output has no gradient, or the output is not ``(B, K)``.
    """
    import torch

    with torch.inference_mode(False), torch.enable_grad(), GradientRecorder(model, [layer]) as rec:
        inputs = (x.clone() if x.is_inference() else x.detach()).requires_grad_(True)
        logits = model(inputs)
        if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
            raise ModelError("class maps need a model that returns (batch, classes) logits")
        classes = int(logits.shape[1])
        if not 1 <= k <= classes:
            raise UsageError(f"--cam-classes must be between 1 and {classes}, got {k}")
        probs = logits.detach().float().softmax(dim=1).cpu()
        top = probs.topk(k, dim=1)
        taken = []
        for rank in range(k):
            index = top.indices[:, rank].to(logits.device).unsqueeze(1)
            rec.backward(
                logits.gather(1, index).sum(),
                inputs,
                retain_graph=rank < k - 1,
                stop_early=True,
            )
            caps = [c for c in rec.captures if c.module == layer]
            if not caps:
                reason = rec.skipped[0].reason if rec.skipped else "it did not run"
                raise ModelError(f"no gradient for {layer}: {reason}; pick another layer")
            taken.append((caps[0].activation, caps[0].gradient))
    # The maps once the hooks are gone: Score-CAM runs the model again.
    per_image: list[list[ClassCam]] = [[] for _ in range(int(top.indices.shape[0]))]
    for rank, (activation, gradient) in enumerate(taken):
        targets = [int(c) for c in top.indices[:, rank]]
        cams = method_cams(
            method,
            activation,
            gradient,
            layout=layout,
            grid=grid,
            prefix_tokens=prefix_tokens,
            model=model,
            x=x,
            targets=targets,
        )
        for i, maps in enumerate(per_image):
            c = targets[i]
            label = categories[c] if categories and c < len(categories) else None
            maps.append(ClassCam(c, label, float(top.values[i, rank]), cams[i], None, method))
    return per_image


def grad_cam(
    activation: torch.Tensor | npt.ArrayLike,
    gradient: torch.Tensor | npt.ArrayLike,
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
) -> torch.Tensor:
    """Grad-CAM: ``ReLU(sum_c mean_hw(grad_c) * A_c)``, scaled to ``[0, 1]`` per map.

    Each map is divided by its maximum, so 0 keeps meaning "no evidence for the class"; an
    all-zero map stays all zero (no NaN).

    Args:
        activation: A layer output, ``(C, H, W)`` or ``(B, C, H, W)`` in ``nchw`` layout; see
            :func:`to_nchw` for the others. A tensor or a numpy array.
        gradient: The gradient of the class score with respect to it, same shape.
        layout, grid, prefix_tokens: How they are laid out (:func:`to_nchw`).

    Returns:
        ``(H, W)`` or ``(B, H, W)`` float32 maps in ``[0, 1]``, on the inputs' device.

    Raises:
        ValueError: For mismatched shapes or a shape that does not fit the layout.
    """
    import torch

    activation, gradient = torch.as_tensor(activation), torch.as_tensor(gradient)
    if activation.shape != gradient.shape:
        raise ValueError(
            f"activation {tuple(activation.shape)} and gradient {tuple(gradient.shape)} differ"
        )
    a = to_nchw(activation, layout, grid=grid, prefix_tokens=prefix_tokens).double()
    g = to_nchw(gradient, layout, grid=grid, prefix_tokens=prefix_tokens).double()
    weights = g.mean(dim=(-2, -1), keepdim=True)
    cam = torch.relu((weights * a).sum(dim=-3))
    peak = cam.amax(dim=(-2, -1), keepdim=True)
    cam = torch.where(peak > 0, cam / torch.where(peak > 0, peak, 1.0), 0.0)
    return cam.float()
