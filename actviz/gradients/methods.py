"""The class activation map methods beside Grad-CAM, in one table: Grad-CAM++ and LayerCAM
(from the same activation and gradient as Grad-CAM), Score-CAM (from forwards of the input
masked by each channel, batched) and EigenCAM (from the activation alone).

Every method returns raw maps (:func:`raw_cam`) that :func:`scale_cams` turns into maps in
``[0, 1]`` the same way: ReLU, then each map divided by its maximum (an all-zero map stays zero).
The formulas follow pytorch-grad-cam 1.5.7's, which the tests check them against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from actviz.errors import UsageError
from actviz.gradients.nchw import CamLayout, to_nchw

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from torch import nn

__all__ = [
    "CAM_METHODS",
    "GRADIENT_FREE",
    "CamMethod",
    "cam_method",
    "cam_title",
    "forward_chunk",
    "method_cams",
    "raw_cam",
    "scale_cams",
    "score_cam",
]

CamMethod = Literal["gradcam", "gradcam++", "layercam", "scorecam", "eigencam"]
CAM_METHODS: tuple[CamMethod, ...] = ("gradcam", "gradcam++", "layercam", "scorecam", "eigencam")
"""Every method's name, as ``--cam-method`` and ``--methods`` take it."""
GRADIENT_FREE: frozenset[str] = frozenset({"scorecam", "eigencam"})
"""Methods that read no gradient (Score-CAM reads the model's scores instead)."""
_TITLES = {
    "gradcam": "Grad-CAM",
    "gradcam++": "Grad-CAM++",
    "layercam": "LayerCAM",
    "scorecam": "Score-CAM",
    "eigencam": "EigenCAM",
}


def cam_method(name: str, option: str = "--cam-method") -> CamMethod:
    """A method name, forgiving case, dashes and underscores (``grad-cam++``, ``Score_CAM``).

    Raises:
        UsageError: For a name that is not a method, listing them.
    """
    key = name.strip().lower().replace("-", "").replace("_", "")
    for method in CAM_METHODS:
        if key == method:
            return method
    raise UsageError(f"{option} takes one of {', '.join(CAM_METHODS)}, not '{name}'")


def cam_title(method: str) -> str:
    """``"Grad-CAM++"`` for ``gradcam++``: the name pictures and tables show."""
    return _TITLES.get(method, method)


def raw_cam(
    method: str,
    activation: torch.Tensor | npt.ArrayLike,
    gradient: torch.Tensor | npt.ArrayLike | None = None,
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
) -> torch.Tensor:
    """One gradient (or activation) method's map before ReLU and scaling, in float64.

    Args:
        method: ``gradcam``, ``gradcam++``, ``layercam`` or ``eigencam`` (Score-CAM needs the
            model: :func:`score_cam`).
        activation: A layer output, batched or not, laid out as ``layout`` (:func:`to_nchw`).
        gradient: The gradient of the class score with respect to it (not for ``eigencam``).

    Returns:
        ``(B, H, W)`` (or ``(H, W)``) float64 maps.

    Raises:
        ValueError: For mismatched shapes, a missing gradient or an unknown method.
    """
    import torch

    from actviz.gradients.eigen import first_component_projection

    a = to_nchw(torch.as_tensor(activation), layout, grid=grid, prefix_tokens=prefix_tokens)
    a = a.double()
    if method == "eigencam":
        return first_component_projection(a).double()
    if gradient is None:
        raise ValueError(f"{method} needs the gradient")
    g = to_nchw(torch.as_tensor(gradient), layout, grid=grid, prefix_tokens=prefix_tokens)
    if a.shape != g.shape:
        raise ValueError(f"activation {tuple(a.shape)} and gradient {tuple(g.shape)} differ")
    g = g.double()
    if method == "gradcam":
        weights = g.mean(dim=(-2, -1), keepdim=True)
    elif method == "gradcam++":
        # Chattopadhay et al. (2018), Eq. 19, with the ReLU of Eq. 7 and alpha 0 where the
        # gradient is 0, as pytorch-grad-cam computes it.
        g2 = g * g
        total = a.sum(dim=(-2, -1), keepdim=True)
        alpha = g2 / (2 * g2 + total * g2 * g + 1e-6)
        alpha = torch.where(g != 0, alpha, 0.0)
        weights = (torch.relu(g) * alpha).sum(dim=(-2, -1), keepdim=True)
    elif method == "layercam":
        return (torch.relu(g) * a).sum(dim=-3)  # per-position weights (Jiang et al., 2021)
    else:
        raise ValueError(f"unknown CAM method {method!r}: one of {', '.join(CAM_METHODS)}")
    return (weights * a).sum(dim=-3)


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


def method_cams(
    method: str,
    activation: torch.Tensor,
    gradient: torch.Tensor | None,
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
    model: nn.Module | None = None,
    x: torch.Tensor | None = None,
    targets: Sequence[int] = (),
) -> torch.Tensor:
    """One method's maps in ``[0, 1]`` (:func:`scale_cams` of :func:`raw_cam`; Score-CAM's by
    :func:`score_cam`, which needs ``model``, ``x`` and ``targets``).

    Raises:
        ValueError: For a shape that does not fit the layout, or an unknown method.
    """
    if method == "scorecam":
        if model is None or x is None:
            raise ValueError("scorecam needs the model, its input and the targets")
        raw = score_cam(
            model, x, activation, targets, layout=layout, grid=grid, prefix_tokens=prefix_tokens
        )
    else:
        raw = raw_cam(
            method, activation, gradient, layout=layout, grid=grid, prefix_tokens=prefix_tokens
        )
    return scale_cams(raw)
