"""Images of different aspect ratios through a preprocessing that does not crop (as
segmentation presets do): every command uses every image, and says how."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import actviz
from actviz.errors import UsageError
from actviz.models import Preprocessing

from .conftest import make_image


class _Seg(nn.Module):
    """A fully convolutional net: its maps follow the input's shape."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.unused = nn.Conv2d(6, 6, 1)
        self.head = nn.Conv2d(6, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.down(torch.relu(self.conv(x)))))


#: Shorter side to 24, no crop: a 48x32 photo becomes 36x24, a square one 24x24.
NO_CROP = Preprocessing.fitted(resize=24, crop=24, crops=False)
OPTS: dict[str, Any] = {"device": "cpu", "report": False, "preprocess": NO_CROP}


@pytest.fixture
def photos(tmp_path: Path, make_photos: Callable[..., Path]) -> Path:
    sizes = [(48, 32), (32, 32), (32, 48), (40, 32), (32, 32)]
    return make_photos(sizes, folder=tmp_path / "photos")


def test_diff_over_mixed_aspect_ratios_compares_at_one_map_size(
    photos: Path, tmp_path: Path
) -> None:
    model = _Seg()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.down.weight.mul_(-1.0)
    result = actviz.diff(
        model,
        [photos],
        against_model=other,
        out=tmp_path / "d",
        layers="conv,down",
        batch_size=2,
        **OPTS,
    )
    assert not result.failed
    by_name = {layer.name: layer for layer in result.layers}
    assert set(by_name) == {"conv", "down", "head"}  # "conv" names every Conv2d
    assert by_name["conv"].cka == pytest.approx(1.0)
    assert by_name["conv"].cosine == pytest.approx(1.0)
    assert by_name["down"].cosine is not None and by_name["down"].cosine < 0.5
    assert result.cka["images"] == 5
    # Compared at the first image's map size, and said so per layer and once overall.
    assert by_name["conv"].shape_a == (4, 24, 36)
    assert "adaptive average pooling" in (by_name["conv"].note or "")
    assert any("--input-size" in w for w in result.warnings)


def test_two_images_of_different_shapes_are_compared(tmp_path: Path) -> None:
    wide = make_image(tmp_path / "wide.png", size=(48, 32))
    square = make_image(tmp_path / "square.png", size=(32, 32), seed=3)
    result = actviz.diff(_Seg(), [wide, square], out=tmp_path / "d", layers="down", **OPTS)
    assert [layer.name for layer in result.layers] == ["down"]
    assert all(layer.cosine is not None and -1 <= layer.cosine < 1 for layer in result.layers)
    assert len(result.pictures) == 1
    assert any("--input-size" in w for w in result.warnings)


def test_a_diff_that_compares_nothing_is_an_error(photos: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no layer could be compared"):
        actviz.diff(
            _Seg(), [photos], against_model=_Seg(), out=tmp_path / "d", layers="unused", **OPTS
        )


def test_top_images_scores_every_image_with_exact_maxima(photos: Path, tmp_path: Path) -> None:
    from PIL import Image

    model = _Seg()
    result = actviz.top_images(model, [photos], out=tmp_path / "t", layers="down", k=5, **OPTS)
    assert result.images == 5 and not result.failed
    assert any("adaptive max pooling" in w for w in result.warnings)
    entries = result.document["layers"][0]["channels"]
    # Each channel's best score is the true maximum of its map over the images, whatever
    # their size.
    maxima = []
    for path in sorted(photos.iterdir()):
        x = NO_CROP(Image.open(path).convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            maps = model.down(torch.relu(model.conv(x)))
        maxima.append(maps[0].amax(dim=(1, 2)))
    best = torch.stack(maxima).amax(dim=0)
    for channel, entry in enumerate(entries):
        assert entry["top"][0]["score"] == pytest.approx(float(best[channel]), rel=1e-4)
