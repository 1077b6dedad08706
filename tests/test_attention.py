"""Attention maps: recomputed weights equal torch's own, per head, for the class token."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from actviz.attention import class_token_attention, find_attention
from actviz.cli import app
from actviz.hooks import ActivationRecorder
from tests.conftest import run_images

runner = CliRunner()


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_maps_equal_torch_attention_weights(batch_first: bool, bias: bool) -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, bias=bias, batch_first=batch_first).eval()
    x = torch.randn(2, 1 + 9, 16)  # a class token and a 3 x 3 patch grid
    args = (x, x, x) if batch_first else (x.transpose(0, 1),) * 3
    maps, reason = class_token_attention(mha, args, {"need_weights": False})
    assert reason is None and maps is not None
    _, weights = mha(*args, need_weights=True, average_attn_weights=False)
    expected = weights[:, :, 0, 1:].reshape(2, 4, 3, 3)
    torch.testing.assert_close(maps, expected, atol=1e-6, rtol=1e-5)
    # Each row of attention sums to 1; without the class token's own column, a bit less.
    sums = maps.sum(dim=(2, 3))
    assert bool(((sums > 0) & (sums < 1)).all())


def test_what_cannot_be_drawn_says_why() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 1 + 6, 8)  # six patches: no square grid
    assert class_token_attention(mha, (x, x, x), {}) == (
        None,
        "6 patch tokens do not form a square grid",
    )
    assert class_token_attention(mha, (), {}) == (
        None,
        "attention called without query and key tensors",
    )
    assert find_attention(nn.Conv2d(3, 3, 1)) is None
    block = nn.Sequential(nn.LayerNorm(8), mha)
    assert find_attention(block) is mha


def _tiny_vit() -> nn.Module:
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()


def test_the_recorder_captures_each_blocks_attention_and_skips_the_rest() -> None:
    model = _tiny_vit()
    blocks = ["encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1", "conv_proj"]
    x = torch.randn(3, 3, 32, 32)
    with ActivationRecorder(model, blocks, mode="attn") as rec, torch.inference_mode():
        model(x)
    keys = [c.key for c in rec.captures]
    assert keys == [f"{b}<attn>" for b in blocks[:2]]
    assert all(c.shape == (3, 2, 4, 4) and c.kind == "attention" for c in rec.captures)
    assert "class-token attention" in rec.captures[0].module_type
    assert [(s.key, s.reason) for s in rec.skipped] == [
        ("conv_proj<attn>", "holds no nn.MultiheadAttention")
    ]
    assert rec.never_called() == []
    # Different blocks attend differently.
    first, second = (rec[k] for k in keys)
    assert not torch.allclose(first, second)
    assert not model.encoder.layers.encoder_layer_0.self_attention._forward_pre_hooks


@pytest.mark.slow
def test_capture_attn_from_the_cli(tmp_path: Path) -> None:
    factory = tmp_path / "tinyvit.py"
    factory.write_text(
        textwrap.dedent(
            """
            import torch
            from torchvision.models import VisionTransformer

            def build():
                torch.manual_seed(0)
                return VisionTransformer(
                    image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                    mlp_dim=32,
                )
            """
        )
    )
    image = tmp_path / "in.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 40, 3), np.uint8)).save(image)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "run",
            f"{factory}:build",
            str(image),
            "--capture",
            "attn",
            "--input-size",
            "32,32",
            "--weights",
            "none",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["selector"] == "MultiheadAttention"
    layers = run_images(out)[0]["layers"]
    assert [x["name"] for x in layers] == [
        "encoder.layers.encoder_layer_0.self_attention<attn>",
        "encoder.layers.encoder_layer_1.self_attention<attn>",
    ]
    assert all(x["channels_total"] == 2 and x["shape"] == [1, 2, 4, 4] for x in layers)
    assert all(0 < x["min"] <= x["max"] < 1 for x in layers)  # attention weights
    picture = np.asarray(Image.open(out / layers[0]["file"]).convert("RGB"))
    assert picture.shape[0] > 40 and picture.std() > 10  # a drawn grid, not a blank


def test_an_attention_grid_counts_heads_and_a_feature_grid_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actviz.render import grid as grid_module
    from actviz.render.grid import render_grid

    infos: list[str] = []
    real = grid_module.Header

    def header(**kwargs: object) -> object:
        infos.append(str(kwargs["info"]))
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(grid_module, "Header", header)
    maps = np.random.default_rng(0).random((2, 4, 4)).astype(np.float32)
    render_grid(maps, title="block<attn>", unit="head")
    render_grid(maps, title="conv")
    render_grid(maps[:1], title="block<attn>", unit="head")
    assert [info.split("  |")[0] for info in infos] == [
        "2 of 2 heads",
        "2 of 2 channels",
        "1 of 1 head",
    ]


def test_a_runs_attention_grid_says_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    from actviz.hooks import Capture
    from actviz.render import grid as grid_module
    from actviz.run.pictures import grid_picture
    from actviz.run.record import layer_view

    captured: list[str] = []
    real = grid_module.render_grid

    def spy(act: Any, **kwargs: Any) -> Any:
        captured.append(str(kwargs.get("unit")))
        return real(act, **kwargs)

    monkeypatch.setattr(grid_module, "render_grid", spy)
    from actviz.run.job import ImageJob
    from actviz.run.options import DrawOptions

    tensor = torch.rand(1, 2, 4, 4)
    for kind in ("attention", "output"):
        cap = Capture("b<attn>", "b", "MultiheadAttention", 1, (1, 2, 4, 4), tensor, kind=kind)
        job = ImageJob([cap], [], 0, PurePosixPath("x"), Path("."), DrawOptions())
        drawn = grid_picture(layer_view(job, cap, "00_b.png"))
        assert drawn is not None and drawn.png and drawn.fields["channels_total"] == 2
    assert captured == ["head", "channel"]


def test_an_attention_overlay_says_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    from actviz.hooks import Capture
    from actviz.render import legend
    from actviz.run.job import ImageJob
    from actviz.run.options import DrawOptions
    from actviz.run.pictures import overlay_picture
    from actviz.run.record import layer_view

    infos: list[str] = []
    real = legend.Header

    def header(**kwargs: Any) -> Any:
        infos.append(str(kwargs["info"]))
        return real(**kwargs)

    monkeypatch.setattr(legend, "Header", header)
    tensor = torch.rand(1, 2, 4, 4)
    for kind in ("attention", "output"):
        cap = Capture("b<attn>", "b", "MultiheadAttention", 1, (1, 2, 4, 4), tensor, kind=kind)
        job = ImageJob(
            [cap], [], 0, PurePosixPath("x"), Path("."), DrawOptions(overlay=True),
            model_input=torch.rand(3, 16, 16), mean=(0.5,) * 3, std=(0.25,) * 3,
        )  # fmt: skip
        assert overlay_picture(layer_view(job, cap, "00_b.png")) is not None
    assert [info.split(" over")[0] for info in infos] == ["mean of 2 heads", "mean of 2 channels"]
