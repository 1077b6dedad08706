"""EigenCAM: a gradient-free class-agnostic map, the projection of a layer's activations on their
first principal component (Muhammad & Yeasin, 2020). It needs no target and no backward pass, so
it serves detection and segmentation models as well as classifiers.

The sign of a principal component is arbitrary (``A = U S V^T = (-U) S (-V)^T``), and LAPACK
picks it by accident of the arithmetic, so two machines can draw opposite maps. The sign here is
fixed by a rule: the projection is flipped when its most negative value is larger in magnitude
than its most positive one (Chung & Ying, Seg-Eigen-CAM, 2025, Eq. 13), so the strongest response
is always positive; on an exact tie the sign that makes the first non-zero loading of the
component positive is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch

__all__ = ["eigen_cam", "first_component_projection"]


def first_component_projection(activations: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
    """Project each image's activations on their first principal component, sign fixed.

    As pytorch-grad-cam's ``get_2d_projection``: per image, the ``(H*W, C)`` matrix of
    activations is centred over positions (each channel's mean removed), then projected on the
    first right-singular vector; NaN counts as 0. Computed in float64, batched.

    Args:
        activations: ``(B, C, H, W)`` (or one image's ``(C, H, W)``), tensor or numpy array.

    Returns:
        Signed ``(B, H, W)`` (or ``(H, W)``) float32 projections, on the input's device, with the
        sign rule of the module docstring applied.

    Raises:
        ValueError: If the input is not 3- or 4-dimensional.
    """
    import torch

    a = torch.as_tensor(activations)
    if a.ndim == 3:
        return first_component_projection(a.unsqueeze(0))[0]
    if a.ndim != 4:
        raise ValueError(f"activations must be (B, C, H, W) or (C, H, W), got {a.ndim} dims")
    batch, channels, height, width = a.shape
    x = torch.nan_to_num(a.detach().double(), nan=0.0).reshape(batch, channels, -1).transpose(1, 2)
    x = x - x.mean(dim=1, keepdim=True)
    # Only V's first row is needed; the reduced SVD gives the same component as the full one.
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    component = vh[:, 0, :]  # (B, C)
    projection = torch.einsum("bpc,bc->bp", x, component)
    low, high = projection.amin(dim=1), projection.amax(dim=1)
    # Tie-break on the component itself: its first loading of non-negligible size made positive.
    scale = component.abs().amax(dim=1, keepdim=True)
    significant = component.abs() > scale * 1e-6
    first = torch.argmax(significant.to(torch.int8), dim=1)
    lead = component.gather(1, first.unsqueeze(1)).squeeze(1)
    tie = torch.isclose(-low, high, rtol=1e-9, atol=0.0)
    flip = torch.where(tie, lead < 0, -low > high)
    projection = torch.where(flip.unsqueeze(1), -projection, projection)
    return projection.reshape(batch, height, width).float()


def eigen_cam(activations: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
    """EigenCAM maps: the first-component projection, ReLU, divided by each map's maximum.

    Scaled like actviz's Grad-CAM (0 keeps meaning "no response", an all-zero map stays zero,
    never NaN). Token and channels-last layer outputs go through
    :func:`actviz.gradients.cam.to_nchw` first.

    Args:
        activations: ``(B, C, H, W)`` (or ``(C, H, W)``) layer output, tensor or numpy array.

    Returns:
        ``(B, H, W)`` (or ``(H, W)``) float32 maps in ``[0, 1]`` on the input's device.

    Raises:
        ValueError: If the input is not 3- or 4-dimensional.
    """
    import torch

    cam = torch.relu(first_component_projection(activations).double())
    peak = cam.amax(dim=(-2, -1), keepdim=True)
    cam = torch.where(peak > 0, cam / torch.where(peak > 0, peak, 1.0), 0.0)
    return cam.float()
