"""top-images calls a channel dead by the rule ``stats`` follows: maps that never fire are
dead; one signed score per channel (logits) never is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import actviz
from actviz.statistics import judges_dead
from actviz.top_images.draw import _status

from .conftest import make_image


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    with torch.no_grad():
        net[0].bias[1] = -100.0  # channel 1 of the maps never fires: dead
        net[4].bias[2] = -100.0  # logit 2 is always negative: a score, not a dead unit
    return net


def test_negative_logits_are_not_dead_but_silent_maps_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz.top_images.draw as draw

    words: list[tuple[str, ...]] = []

    def status(*args: Any, **kwargs: Any) -> tuple[str, ...]:
        words.append(_status(*args, **kwargs))
        return words[-1]

    monkeypatch.setattr(draw, "_status", status)
    for i in range(3):
        make_image(tmp_path / "in" / f"p{i}.png", size=(32, 32), seed=i)
    result = actviz.top_images(
        _net(),
        [tmp_path / "in"],
        out=tmp_path / "out",
        layers="1,4",
        k=2,
        input_size=(32, 32),
        device="cpu",
        report=False,
    )
    maps, logits = result.layers
    assert (maps.key, maps.dead, maps.dead_judged) == ("1", 1, True)
    assert (logits.key, logits.dead, logits.dead_judged) == ("4", 0, False)
    doc_maps, doc_logits = result.document["layers"]
    assert [c["dead"] for c in doc_maps["channels"]] == [False, True, False, False]
    assert [c["dead"] for c in doc_logits["channels"]] == [False, False, False]
    assert doc_logits["channels"][2]["max_score"] < 0
    assert doc_logits["dead_channels"] == 0 and doc_logits["dead_judged"] is False
    # The contact sheets' words: one dead map channel; the negative logit is a score.
    firsts = [w[0] for w in words]
    assert len(firsts) == 7
    assert [w for w in firsts if w.startswith("DEAD")] == ["DEAD: never above zero in 3 images"]
    assert "above zero in 0% of images" in firsts
    assert judges_dead(32 * 32) and not judges_dead(1)  # the rule stats follows


def test_overviews_stay_within_what_pillow_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1))
    for i in range(2):
        make_image(tmp_path / "in" / f"p{i}.png", size=(16, 16), seed=i)
    result = actviz.top_images(
        wide,
        [tmp_path / "in"],
        out=tmp_path / "out",
        layers="0",
        k=2,
        channels=0,
        input_size=(16, 16),
        device="cpu",
        report=False,
    )
    layer = result.layers[0]
    assert layer.overview is not None
    with Image.open(result.out / layer.overview) as picture:  # refused above the limit
        width, height = picture.size
    assert width * height <= 1_000_000
    assert height < 64 * 64  # fewer rows than channels
    sheets = list((result.out / layer.overview).parent.glob("c*.png"))
    assert len(sheets) == 64  # every channel keeps its sheet


def test_gradient_flow_charts_of_random_weights_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz.gradients.gradient_flow as flowchart
    from actviz.command.session import RANDOM_NOTE

    titles: list[str] = []
    chart = flowchart.gradient_flow_png

    def recorded(*args: Any, title: str, **kwargs: Any) -> bytes:
        titles.append(title)
        return chart(*args, title=title, **kwargs)

    monkeypatch.setattr(flowchart, "gradient_flow_png", recorded)
    image = make_image(tmp_path / "in" / "p.png", size=(32, 32))
    result = actviz.run(
        "resnet18",
        [image],
        out=tmp_path / "out",
        layers="layer4.1.conv2,fc",
        grads=True,
        input_size=(32, 32),
        device="cpu",
        report=False,
        stats=False,
    )
    assert result.weights.random and result.gradient_flow is not None
    assert len(titles) == 2 and all(t.endswith(RANDOM_NOTE) for t in titles)
