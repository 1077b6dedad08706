"""The image parameterization of feature visualization: a decorrelated Fourier basis.

Each image is held as the real and imaginary parts of its 2D spectrum, scaled by 1/f so the
optimizer moves low frequencies as easily as high ones, and in a colour space decorrelated by
the square root of ImageNet's colour covariance; a sigmoid maps it to [0, 1]. This is the
parameterization of Olah et al. (Distill 2017) and of Lucent, with the same constants, so the
images match what those tools give. Torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

__all__ = ["COLOR_CORRELATION", "FourierImage", "spectrum_scale"]

#: Square root of ImageNet's colour covariance (Lucent's ``color_correlation_svd_sqrt``).
_SVD_SQRT = np.array(
    [[0.26, 0.09, 0.02], [0.27, 0.00, -0.05], [0.27, -0.09, 0.03]], dtype=np.float32
)
#: The same, scaled so that its largest column has norm 1.
COLOR_CORRELATION: npt.NDArray[np.float32] = _SVD_SQRT / np.max(np.linalg.norm(_SVD_SQRT, axis=0))
#: Lucent divides the inverse FFT by this so the initial image is near grey.
_MAGIC = 4.0
#: Standard deviation of the initial spectrum.
INIT_SD = 0.01


def _frequencies(height: int, width: int) -> npt.NDArray[np.float64]:
    """The radial frequency of each bin of a real 2D FFT of this size (Lucent's
    ``rfft2d_freqs``)."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.fftfreq(width)[: width // 2 + (2 if width % 2 else 1)]
    freqs: npt.NDArray[np.float64] = np.sqrt(fx * fx + fy * fy)
    return freqs


def spectrum_scale(height: int, width: int, decay_power: float = 1.0) -> npt.NDArray[np.float32]:
    """The 1/f scale of each frequency bin, capped at the lowest frequency the image holds."""
    freqs = _frequencies(height, width)
    scale = 1.0 / np.maximum(freqs, 1.0 / max(height, width)) ** decay_power
    return scale.astype(np.float32)


class FourierImage:
    """A batch of images held as scaled spectra; one image per seed.

    Each image's initial spectrum comes from its own generator seeded by ``seeds[i]``, so an
    image does not depend on which other images share its batch.

    Args:
        seeds: One seed per image of the batch.
        size: Height and width of the images.
        device: Where the spectra live.
    """

    def __init__(self, seeds: Sequence[int], size: int, device: torch.device | str) -> None:
        import torch

        self.size = size
        freqs = _frequencies(size, size)
        shape = (3, *freqs.shape, 2)
        init = []
        for seed in seeds:
            generator = torch.Generator().manual_seed(int(seed))
            init.append(torch.randn(shape, generator=generator) * INIT_SD)
        self.spectrum = torch.stack(init).to(device).requires_grad_(True)
        self._scale = torch.from_numpy(spectrum_scale(size, size))[None, None, ..., None].to(device)
        self._colour = torch.from_numpy(COLOR_CORRELATION.T.copy()).to(device)

    def parameters(self) -> list[torch.Tensor]:
        """What the optimizer changes."""
        return [self.spectrum]

    def __call__(self) -> torch.Tensor:
        """The images, ``(B, 3, size, size)`` in [0, 1]."""
        import torch

        scaled = torch.view_as_complex(self._scale * self.spectrum)
        image = torch.fft.irfftn(scaled, s=(self.size, self.size), norm="ortho") / _MAGIC
        # Decorrelated colour -> RGB: each pixel's three values times the colour matrix.
        image = (image.permute(0, 2, 3, 1) @ self._colour).permute(0, 3, 1, 2)
        # Back to channels-first strides: convolutions on CPU are several times slower on
        # the channels-last layout the permutation leaves.
        return torch.sigmoid(image).contiguous()
