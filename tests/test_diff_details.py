"""What a diff says besides the similarities: where B first differs at all, and what CKA
depends on."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import nn

import actviz

from .conftest import make_image


def test_a_pure_scaling_is_named_as_the_first_changed_layer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1))
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        scaled[1].weight.mul_(2.0)
        scaled[1].bias.mul_(2.0)
    for i in range(5):
        make_image(tmp_path / "in" / f"p{i}.png", size=(24, 24), seed=i)
    result = actviz.diff(
        model,
        [tmp_path / "in"],
        against_model=scaled,
        out=tmp_path / "out",
        layers="0,1",
        input_size=(24, 24),
        device="cpu",
        batch_size=4,
        report=False,
    )
    assert result.first_divergent is None  # the cosine stays 1: a scaling keeps the angle
    assert result.first_changed == "1"
    by_name = {layer.name: layer for layer in result.layers}
    assert by_name["1"].rel_l2 is not None and abs(by_name["1"].rel_l2 - 1.0) < 1e-5
    record = json.loads((tmp_path / "out" / "diff.json").read_text(encoding="utf-8"))
    assert record["first_changed"] == {"layer": "1", "rel_l2_above": 0.001}
    assert record["cka"]["batch_size"] == 4 and "--batch-size" in record["cka"]["batches"]


def test_pictures_of_an_unchanged_layer_say_identical() -> None:
    import numpy as np

    from actviz.diff.pictures import PictureScale, caption_lines, render_diff

    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, 5, 5)).astype(np.float32)
    same, other = PictureScale(), PictureScale()
    same.update(a, a.copy())
    b = a.copy()
    b[3] += 1.0
    other.update(a, b)
    titles = ("A", "B", "B - A")
    panels = render_diff(a, a.copy(), titles=titles, scale=same, max_channels=4)
    assert panels.identical and panels.channels == (0, 1, 2, 3)
    caption = " ".join(caption_lines("x", "img", panels, cosine=1.0, rel_l2=0.0, scope="here"))
    assert "identical" in caption and "differ most" not in caption
    changed = render_diff(a, b, titles=titles, scale=other, max_channels=4)
    assert not changed.identical and 3 in changed.channels
    caption = " ".join(caption_lines("x", "img", changed, cosine=0.9, rel_l2=0.1, scope="here"))
    assert "differ most" in caption and "identical" not in caption
