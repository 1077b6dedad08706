"""The class activation map methods beside Grad-CAM, in one table: Grad-CAM++ and LayerCAM
(from the same activation and gradient as Grad-CAM), Score-CAM (from forwards of the input
masked by each channel, batched) and EigenCAM (from the activation alone).

Every method returns raw maps (:func:`actviz.gradients.registry.raw_cam`) that
:func:`scale_cams` turns into maps in
``[0, 1]`` the same way: ReLU, then each map divided by its maximum (an all-zero map stays zero).
The formulas follow pytorch-grad-cam 1.5.7's, which the tests check them against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.gradients.eigen import first_component_projection
from actviz.gradients.nchw import CamLayout, to_nchw

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from torch import nn

__all__ = [
    "CamInputs",
    "eigencam_raw",
    "forward_chunk",
    "gradcam_raw",
    "gradcampp_raw",
    "layercam_raw",
    "scale_cams",
    "score_cam",
    "scorecam_raw",
]


@dataclass(frozen=True)
class CamInputs:
    """What a CAM method's function reads (:data:`actviz.gradients.registry.MAP_METHODS`).

    Attributes:
        activation: A layer output, batched or not, laid out as ``layout`` (:func:`to_nchw`).
        gradient: The gradient of the class score with respect to it (None: not taken).
        layout, grid, prefix_tokens: How the output is laid out.
        model, x, targets: The model, its input batch and each image's class, for a method
            that runs the model again (Score-CAM).
        batch_size: Inputs per forward of such a method (None: :func:`forward_chunk`'s).
    """

    activation: torch.Tensor | npt.ArrayLike
    gradient: torch.Tensor | npt.ArrayLike | None = None
    layout: CamLayout = "nchw"
    grid: tuple[int, int] | None = None
    prefix_tokens: int = 1
    model: nn.Module | None = None
    x: torch.Tensor | None = None
    targets: Sequence[int] = ()
    batch_size: int | None = None

    def nchw(self, tensor: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
        """``tensor`` (the activation or the gradient) channels-first, in float64."""
        import torch

        shaped = to_nchw(
            torch.as_tensor(tensor), self.layout, grid=self.grid, prefix_tokens=self.prefix_tokens
        )
        return shaped.double()

    def pair(self, method: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The activation and the gradient channels-first, in float64.

        Raises:
            ValueError: Without a gradient, or for shapes that differ.
        """
        if self.gradient is None:
            raise ValueError(f"{method} needs the gradient")
        a, g = self.nchw(self.activation), self.nchw(self.gradient)
        if a.shape != g.shape:
            raise ValueError(f"activation {tuple(a.shape)} and gradient {tuple(g.shape)} differ")
        return a, g


def gradcam_raw(inputs: CamInputs) -> torch.Tensor:
    """Grad-CAM (Selvaraju et al., 2017): each channel weighed by its mean gradient."""
    a, g = inputs.pair("gradcam")
    return (g.mean(dim=(-2, -1), keepdim=True) * a).sum(dim=-3)


def gradcampp_raw(inputs: CamInputs) -> torch.Tensor:
    """Grad-CAM++ (Chattopadhay et al., 2018), Eq. 19, with the ReLU of Eq. 7 and alpha 0
    where the gradient is 0, as pytorch-grad-cam computes it."""
    import torch

    a, g = inputs.pair("gradcam++")
    g2 = g * g
    total = a.sum(dim=(-2, -1), keepdim=True)
    alpha = g2 / (2 * g2 + total * g2 * g + 1e-6)
    alpha = torch.where(g != 0, alpha, 0.0)
    weights = (torch.relu(g) * alpha).sum(dim=(-2, -1), keepdim=True)
    return (weights * a).sum(dim=-3)


def layercam_raw(inputs: CamInputs) -> torch.Tensor:
    """LayerCAM (Jiang et al., 2021): per-position weights, the gradient's positive part."""
    import torch

    a, g = inputs.pair("layercam")
    return (torch.relu(g) * a).sum(dim=-3)


def eigencam_raw(inputs: CamInputs) -> torch.Tensor:
    """EigenCAM (Muhammad & Yeasin, 2020): the activations' first principal component."""

    return first_component_projection(inputs.nchw(inputs.activation)).double()


def scorecam_raw(inputs: CamInputs) -> torch.Tensor:
    """Score-CAM (Wang et al., 2020): :func:`score_cam` on the inputs' model and batch.

    Raises:
        ValueError: Without the model, its input or the targets.
    """
    import torch

    if inputs.model is None or inputs.x is None:
        raise ValueError("scorecam needs the model, its input and the targets")
    return score_cam(
        inputs.model,
        inputs.x,
        torch.as_tensor(inputs.activation),
        inputs.targets,
        layout=inputs.layout,
        grid=inputs.grid,
        prefix_tokens=inputs.prefix_tokens,
        batch_size=inputs.batch_size,
    )


def scale_cams(raw: torch.Tensor) -> torch.Tensor:
    """ReLU, then each map divided by its maximum: float32 maps in ``[0, 1]``, never NaN."""
    import torch

    cam = torch.relu(torch.nan_to_num(raw.double(), nan=0.0))
    peak = cam.amax(dim=(-2, -1), keepdim=True)
    return torch.where(peak > 0, cam / torch.where(peak > 0, peak, 1.0), 0.0).float()


def score_cam(
    model: nn.Module,
    x: torch.Tensor,
    activation: torch.Tensor,
    targets: Sequence[int],
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
    batch_size: int | None = None,
) -> torch.Tensor:
    """Score-CAM (Wang et al., 2020): each channel, upsampled and min-max scaled, masks the
    input; the target's logit on each masked input, softmaxed over channels, weighs the
    channels. The masked inputs of every image and channel go through the model in batches of
    ``batch_size`` (default :func:`forward_chunk`'s), on the model's device.

    Args:
        model: A classifier returning ``(B, K)`` logits.
        x: ``(B, 3, H, W)`` input batch on the model's device.
        activation: The layer output for ``x``.
        targets: Each image's class.
        batch_size: Masked inputs per forward (None: :func:`forward_chunk`'s).

    Returns:
        ``(B, h, w)`` float64 raw maps (before ReLU and scaling), on the CPU.

    Raises:
        ValueError: For a layout the activation does not fit, or a target count that differs
            from the batch.
    """
    import torch
    import torch.nn.functional as F

    a = to_nchw(activation, layout, grid=grid, prefix_tokens=prefix_tokens)
    if len(targets) != a.shape[0]:
        raise ValueError(f"{len(targets)} targets for a batch of {a.shape[0]}")
    batch, channels = int(a.shape[0]), int(a.shape[1])
    size = (int(x.shape[-2]), int(x.shape[-1]))
    if batch_size is None:
        batch_size = forward_chunk(x.device.type, size)
    scores = torch.empty(batch, channels, dtype=torch.float64)
    with torch.inference_mode():
        # align_corners=True: pytorch-grad-cam's nn.UpsamplingBilinear2d.
        up = F.interpolate(a.float().to(x.device), size=size, mode="bilinear", align_corners=True)
        flat = up.flatten(2)
        low, high = flat.amin(dim=2)[..., None, None], flat.amax(dim=2)[..., None, None]
        masks = (up - low) / (high - low + 1e-8)
        pairs = [(i, c) for i in range(batch) for c in range(channels)]
        for start in range(0, len(pairs), max(1, batch_size)):
            chunk = pairs[start : start + max(1, batch_size)]
            images = torch.tensor([i for i, _ in chunk], device=x.device)
            chans = torch.tensor([c for _, c in chunk], device=x.device)
            masked = x[images] * masks[images, chans].unsqueeze(1)
            logits = model(masked)
            picked = torch.tensor([targets[i] for i, _ in chunk], device=x.device)
            values = logits.gather(1, picked.unsqueeze(1)).squeeze(1).double().cpu()
            for (i, c), value in zip(chunk, values.tolist(), strict=True):
                scores[i, c] = value
    weights = torch.softmax(scores, dim=1)
    return (weights[..., None, None] * a.detach().double().cpu()).sum(dim=1)


#: Pixels of a forward-only batch on a CPU (batch x height x width). Measured with 2 threads:
#: resnet18 per image at 128 px takes 2.8 ms in batches of 24 and 3.4 ms in batches of 64,
#: resnet50 at 224 px 21.8 ms in batches of 8 and 34.4 ms in batches of 64 (larger batches fall
#: out of the caches, and their activations are fresh memory each time); the best batch of
#: resnet18 and 50 at 128-224 px and of vgg11 sits near this many pixels.
CPU_CHUNK_PIXELS = 400_000


def forward_chunk(device: str, size: tuple[int, int], default: int = 64) -> int:
    """Inputs per forward-only batch: on a CPU about :data:`CPU_CHUNK_PIXELS` pixels (at most
    ``default``); elsewhere ``default``."""
    if device != "cpu":
        return default
    fits = round(CPU_CHUNK_PIXELS / max(1, size[0] * size[1]))
    return max(1, min(default, fits))
