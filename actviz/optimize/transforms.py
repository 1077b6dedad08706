"""Lucent's standard transforms, with torch operations only.

Each step the images are padded, shifted, scaled and rotated by small random amounts before
they reach the model, so the optimizer cannot win with a pattern that only works at one exact
pixel offset (the high-frequency noise an unregularized optimization finds). The sequence and
its constants are Lucent's ``standard_transforms``: pad 12 (grey), jitter 8, scale by one of
``1 + (i - 5) / 50``, rotate by -10..10 degrees (0 five times as likely), jitter 4. One draw per
step applies to the whole batch, as in Lucent. Randomness comes from a ``random.Random`` the
caller seeds, so a seed gives the same images.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["ANGLES", "SCALES", "jitter", "pad", "random_rotate", "random_scale", "standard"]

SCALES: tuple[float, ...] = tuple(1 + (i - 5) / 50.0 for i in range(11))
ANGLES: tuple[int, ...] = tuple(range(-10, 11)) + (0,) * 5


def pad(image: torch.Tensor, width: int = 12, value: float = 0.5) -> torch.Tensor:
    """Pad every side by ``width`` pixels of ``value`` (grey)."""
    from torch.nn import functional as F

    return F.pad(image, (width, width, width, width), mode="constant", value=value)


def jitter(image: torch.Tensor, d: int, rng: random.Random) -> torch.Tensor:
    """Shift right and down by 0..d-1 pixels each, filling with zeros (kornia's translate by
    whole pixels, as Lucent uses it)."""
    from torch.nn import functional as F

    dx, dy = rng.randrange(d), rng.randrange(d)
    h, w = image.shape[-2:]
    return F.pad(image, (dx, 0, dy, 0))[..., :h, :w]


def random_scale(image: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """Resize by one of :data:`SCALES` (bilinear, corners aligned), padded back with zeros when
    it shrank."""
    from torch.nn import functional as F

    scale = rng.choice(SCALES)
    h, w = image.shape[-2:]
    new_h, new_w = math.ceil(scale * h), math.ceil(scale * w)
    pad_x = max(0, math.ceil((w - new_w) / 2))
    pad_y = max(0, math.ceil((h - new_h) / 2))
    resized = F.interpolate(image, size=(new_h, new_w), mode="bilinear", align_corners=True)
    # Lucent pads [pad_y, pad_x] * 2 in F.pad's (left, right, top, bottom) order; kept as is.
    return F.pad(resized, [pad_y, pad_x, pad_y, pad_x])


def random_rotate(image: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """Rotate about the centre by one of :data:`ANGLES` degrees (bilinear, zeros outside)."""
    import torch
    from torch.nn import functional as F

    angle = math.radians(rng.choice(ANGLES))
    if angle == 0:
        return image
    cos, sin = math.cos(angle), math.sin(angle)
    theta = torch.tensor(
        [[cos, -sin, 0.0], [sin, cos, 0.0]], dtype=image.dtype, device=image.device
    ).expand(image.shape[0], 2, 3)
    grid = F.affine_grid(theta, list(image.shape), align_corners=False)
    return F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def standard(image: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """Lucent's ``standard_transforms``, in its order."""
    image = pad(image, 12, 0.5)
    image = jitter(image, 8, rng)
    image = random_scale(image, rng)
    image = random_rotate(image, rng)
    return jitter(image, 4, rng)
