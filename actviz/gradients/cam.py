"""Grad-CAM: where in the image a layer found the evidence for a class. ViT tokens and
channels-last (Swin) blocks are laid out like a convolution's output (:func:`to_nchw`), so every
architecture goes through the same formula."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from actviz.errors import ModelError, UsageError
from actviz.gradients.recorder import GradientRecorder

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from torch import nn

__all__ = ["CamLayout", "ClassCam", "class_cams", "grad_cam", "to_nchw"]

CamLayout = Literal["nchw", "nhwc", "tokens"]
"""How a layer output is laid out, for :func:`to_nchw` and :func:`grad_cam`."""


@dataclass(frozen=True)
class ClassCam:
    """The Grad-CAM of one class for one image.

    Attributes:
        index: The class index.
        label: The class name, when the model has names.
        probability: The class's softmax probability for the image.
        cam: ``(h, w)`` map in ``[0, 1]``.
        note: Why the map is all zero, when it is and the reason is known.
    """

    index: int
    label: str | None
    probability: float
    cam: torch.Tensor
    note: str | None = None

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
) -> list[list[ClassCam]]:
    """Grad-CAM maps of each image's ``k`` most likely classes, from one forward.

    One forward, then ``k`` backward passes over the same graph (rank 1, rank 2, ...).

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
        per_image: list[list[ClassCam]] = [[] for _ in range(logits.shape[0])]
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
            cams = grad_cam(
                caps[0].activation,
                caps[0].gradient,
                layout=layout,
                grid=grid,
                prefix_tokens=prefix_tokens,
            )
            for i, maps in enumerate(per_image):
                c = int(top.indices[i, rank])
                label = categories[c] if categories and c < len(categories) else None
                maps.append(ClassCam(c, label, float(top.values[i, rank]), cams[i]))
        return per_image


def to_nchw(
    tensor: torch.Tensor,
    layout: CamLayout = "nchw",
    *,
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
) -> torch.Tensor:
    """Reshape a layer output to ``(B, C, H, W)`` (or one image's to ``(C, H, W)``).

    Args:
        tensor: ``nchw``: ``(B, C, H, W)``; ``nhwc`` (Swin): ``(B, H, W, C)``; ``tokens``
            (ViT): ``(B, prefix + h*w, C)``. The batch dimension may be left out.
        layout: One of ``nchw``, ``nhwc``, ``tokens``.
        grid: For ``tokens``: the patch grid ``(h, w)``; None assumes a square one.
        prefix_tokens: For ``tokens``: how many class/register tokens come first.

    Returns:
        A view or copy laid out channels-first.

    Raises:
        ValueError: For a shape that does not fit the layout.
    """
    unbatched = {"nchw": 3, "nhwc": 3, "tokens": 2}.get(layout)
    if unbatched is None:
        raise ValueError(f"layout must be nchw, nhwc or tokens, got {layout!r}")
    if tensor.ndim == unbatched:
        return to_nchw(tensor.unsqueeze(0), layout, grid=grid, prefix_tokens=prefix_tokens)[0]
    if tensor.ndim != unbatched + 1:
        raise ValueError(f"a {layout} output must have {unbatched + 1} dims, got {tensor.ndim}")
    if layout == "nchw":
        return tensor
    if layout == "nhwc":
        return tensor.permute(0, 3, 1, 2)
    batch, count, channels = tensor.shape
    patches = count - prefix_tokens
    if grid is None:
        side = math.isqrt(max(patches, 0))
        grid = (side, side)
    if patches <= 0 or grid[0] * grid[1] != patches:
        raise ValueError(
            f"{count} tokens minus {prefix_tokens} prefix tokens do not fill a "
            f"{grid[0]}x{grid[1]} grid; pass grid=(h, w) and prefix_tokens"
        )
    return tensor[:, prefix_tokens:].reshape(batch, grid[0], grid[1], channels).permute(0, 3, 1, 2)


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
