"""Shared fixtures: a tiny model with known names, generated images, a CLI runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image


@pytest.fixture
def tiny_net():  # type: ignore[no-untyped-def]
    """Conv -> BN -> in-place ReLU, a ReLU module called twice, a Linear head.

    Names: stem.conv, stem.bn, stem.relu, block.conv, act (called twice), pool, head.
    """
    import torch
    from torch import nn

    class Stem(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.bn(self.conv(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 6, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = Stem()
            self.block = Block()
            self.act = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.head = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.act(self.stem(x) - 0.5)  # first call of `act`
            x = self.act(self.block(x))  # second call
            return self.head(self.pool(x).flatten(1))

    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        # Make bn produce clearly negative values so an in-place ReLU would be visible.
        model.stem.bn.bias.fill_(-1.0)
    return model.eval()


def make_image(path: Path, size: tuple[int, int] = (64, 48), seed: int = 0) -> Path:
    """Write a smooth RGB test picture (gradients plus a bright square) and return its path."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack(
        [xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], axis=-1
    ).astype(np.uint8)
    img[h // 4 : h // 2, w // 4 : w // 2] = 255
    img = np.clip(img + rng.integers(0, 8, img.shape), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path)
    return path


@pytest.fixture
def image_file(tmp_path: Path) -> Path:
    return make_image(tmp_path / "in" / "dog.png")


def run_images(out: Path) -> list[dict[str, Any]]:
    """Every image record of the run in ``out``, in order, read back from its ledger (what
    ``manifest.json`` listed under ``"images"`` before it pointed at the ledger)."""
    import actviz

    return list(actviz.read_images(out))
