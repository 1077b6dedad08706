"""Windowed attention: each image's rows put back into its own grid, whatever the batch size;
rows that cannot be attributed to images refused by name, never drawn for the wrong image."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from actviz.cli import app
from actviz.hooks import ActivationRecorder
from actviz.layouts import layer_contexts
from tests.conftest import REBATCH_SCALE, run_images, same_up_to_batching, write_photos

timm = pytest.importorskip("timm")
runner = CliRunner()

# float32 results of a batch of 3 and of one image differ by a few roundings at most.
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _timm_swin() -> nn.Module:
    torch.manual_seed(0)
    return timm.models.swin_transformer.SwinTransformer(
        img_size=64, patch_size=4, window_size=4, embed_dim=16, depths=(2,), num_heads=(2,),
        num_classes=5,
    ).eval()  # fmt: skip


def _capture(model: nn.Module, names: list[str], x: torch.Tensor, **kw: Any) -> dict[str, Any]:
    with ActivationRecorder(model, names, per_image=True) as rec, torch.inference_mode():
        model(x, **kw) if kw else model(x)
        return {c.key: c for c in rec.captures}


def _each_image_alone(model: nn.Module, names: list[str], x: torch.Tensor) -> None:
    """Every capture of image i at batch size 3 equals the same image's alone."""
    batch = _capture(model, names, x)
    for i in range(x.shape[0]):
        alone = _capture(model, names, x[i : i + 1])
        for key, cap in batch.items():
            assert cap.tensor.shape[0] == 3, key
            # Within a few float32 roundings of the layer's magnitude (another batch runs
            # other kernels); another image's window would be off by about that magnitude.
            rms = float(alone[key].tensor.square().mean().sqrt())
            close = {"rtol": 1e-5, "atol": REBATCH_SCALE * rms}
            torch.testing.assert_close(cap.tensor[i : i + 1], alone[key].tensor, **close)


def test_timm_swin_windows_are_each_images_grid_at_any_batch_size() -> None:
    model = _timm_swin()
    names = [
        "layers.0.blocks.0.attn",  # plain windows
        "layers.0.blocks.1.attn",  # shifted windows
        "layers.0.blocks.1.attn.qkv",
        "layers.0.blocks.0.attn.softmax",
        "layers.0.blocks.1.norm1",
    ]
    x = torch.randn(3, 3, 64, 64)
    caps = _capture(model, names, x)
    attn, qkv, weights = (caps[n] for n in (names[1], names[2], names[3]))
    # 16 x 16 patches in 16 windows of 4 x 4: one (16, 16, C) grid per image.
    assert attn.shape == (3, 16, 16, 16) and qkv.shape == (3, 16, 16, 48)
    assert attn.rows == "16 window(s) of 4 x 4 reassembled into the image's 16 x 16 grid"
    assert attn.refused is None and caps[names[4]].rows is None
    # The weights stay per window, but per image: (images, windows, heads, N, N).
    assert weights.shape == (3, 16, 2, 16, 16) and "one row per window" in (weights.rows or "")
    # The grid is the image's: a per-token projection of the block's own normalized map,
    # at the same place (the shift rolled back), and the block's own attention result.
    block = model.layers[0].blocks[1]
    normed = caps[names[4]].tensor
    with torch.inference_mode():
        torch.testing.assert_close(qkv.tensor, block.attn.qkv(normed), **TOL)
        torch.testing.assert_close(attn.tensor, block._attn(normed), **TOL)
    _each_image_alone(model, names, x)


def test_the_grid_is_drawn_channels_last_even_when_its_side_equals_the_channels() -> None:
    ctx = layer_contexts(_timm_swin(), (64, 64))
    assert ctx["layers.0.blocks.0.attn"].channels_last is True
    assert ctx["layers.0.blocks.0.attn.qkv"].channels_last is True


def test_hugging_face_swin_windows_are_each_images_grid() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.SwinConfig(
        image_size=64, patch_size=4, embed_dim=16, depths=[2], num_heads=[2], window_size=4
    )
    torch.manual_seed(0)
    model = transformers.SwinForImageClassification(config).eval()
    block = model.swin.encoder.layers[0].blocks[1]  # shifted windows
    prefix = "swin.encoder.layers.0.blocks.1"
    projection = next(n for n in ("attention.q_proj", "attention.self.query") if _has(block, n))
    names = [f"{prefix}.layernorm_before", f"{prefix}.{projection}", f"{prefix}.attention"]
    x = torch.randn(3, 3, 64, 64)
    caps = _capture(model, names, x)
    query = caps[f"{prefix}.{projection}"]
    assert query.shape == (3, 16, 16, 16) and "reassembled" in (query.rows or "")
    normed = caps[f"{prefix}.layernorm_before"].tensor.reshape(3, 16, 16, 16)
    with torch.inference_mode():
        projected = block.get_submodule(projection)(normed)
    torch.testing.assert_close(query.tensor, projected, **TOL)
    assert caps[f"{prefix}.attention[0]"].shape == (3, 16, 16, 16)
    _each_image_alone(model, names, x)


def _has(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


@pytest.mark.parametrize("nchw", [False, True], ids=["channels-last", "channels-first"])
@pytest.mark.parametrize("block", ["attn_block", "attn_grid"])
def test_timm_maxvit_windows_and_grid_cells_are_each_images_grid(block: str, nchw: bool) -> None:
    from timm.models.maxxvit import MaxxVit, MaxxVitCfg, MaxxVitConvCfg, MaxxVitTransformerCfg

    torch.manual_seed(0)
    cfg = MaxxVitCfg(
        embed_dim=(16,),
        depths=(1,),
        block_type=("M",),
        stem_width=16,
        conv_cfg=MaxxVitConvCfg(),
        transformer_cfg=MaxxVitTransformerCfg(
            dim_head=8, window_size=(4, 4), grid_size=(4, 4), use_nchw_attn=nchw
        ),
    )
    model = MaxxVit(cfg, img_size=64, num_classes=5).eval()
    prefix = f"stages.0.blocks.0.{block}"
    names = [f"{prefix}.norm1", f"{prefix}.attn", f"{prefix}.attn.qkv"]
    x = torch.randn(3, 3, 64, 64)
    caps = _capture(model, names, x)
    normed = caps[f"{prefix}.norm1"].tensor
    module = model.get_submodule(prefix)
    assert caps[f"{prefix}.attn"].shape == (3, 16, 16, 16)
    assert caps[f"{prefix}.attn.qkv"].shape == ((3, 48, 16, 16) if nchw else (3, 16, 16, 48))
    with torch.inference_mode():
        torch.testing.assert_close(caps[f"{prefix}.attn.qkv"].tensor, module.attn.qkv(normed))
        torch.testing.assert_close(caps[f"{prefix}.attn"].tensor, module._partition_attn(normed))
    _each_image_alone(model, names, x)


class Shuffled(nn.Module):
    """Cuts each image into 4 quarters stacked along the batch, in an order no metadata says."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        x = x.reshape(b, c, 2, h // 2, 2, w // 2).permute(2, 4, 0, 1, 3, 5)
        return x.reshape(4 * b, c, h // 2, w // 2)


class Quartered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.cut = Shuffled()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cut(self.conv(x))
        return self.pool(y).reshape(4, x.shape[0], 4).mean(0)


def test_rows_that_are_not_the_images_are_refused_by_name() -> None:
    model = Quartered().eval()
    caps = _capture(model, ["conv", "cut"], torch.randn(2, 3, 8, 8))
    cut = caps["cut"]
    assert cut.refused is not None and "holds 4 rows per image" in cut.refused
    assert "cannot be attributed to images" in cut.refused
    alone = _capture(model, ["cut"], torch.randn(1, 3, 8, 8))["cut"]
    assert alone.refused == cut.refused  # the same words whatever the batch size
    # Nothing of it can be taken for an image: the kept tensor is empty, one row per image.
    assert cut.tensor.shape == (2, 0) and cut.summary is None and cut.shape == (8, 4, 4, 4)
    assert caps["conv"].refused is None and caps["conv"].tensor.shape == (2, 4, 8, 8)
    raw = _raw(model, torch.randn(2, 3, 8, 8))
    assert raw.shape == (8, 4, 4, 4)  # by default, what the module returns


def _raw(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with ActivationRecorder(model, ["cut"]) as rec, torch.inference_mode():
        model(x)
        assert "holds 4 rows per image" in str(rec.captures[0].refused)
        return rec["cut"]


FACTORY = """
import torch, timm
from torch import nn

def swin():
    torch.manual_seed(0)
    return timm.models.swin_transformer.SwinTransformer(
        img_size=64, patch_size=4, window_size=4, embed_dim=16, depths=(2,), num_heads=(2,),
        num_classes=5,
    )

class Shuffled(nn.Module):
    def forward(self, x):
        b, c, h, w = x.shape
        x = x.reshape(b, c, 2, h // 2, 2, w // 2).permute(2, 4, 0, 1, 3, 5)
        return x.reshape(4 * b, c, h // 2, w // 2)

class Quartered(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.cut = Shuffled()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = self.cut(self.conv(x))
        return self.pool(y).reshape(4, x.shape[0], 4).mean(0)

def quartered():
    torch.manual_seed(0)
    return Quartered()
"""


@pytest.fixture(scope="module")
def arch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("windows")
    (root / "arch.py").write_text(textwrap.dedent(FACTORY))
    return root / "arch.py", write_photos(root / "photos", 3, size=(72, 64))


def _invoke(*args: str) -> None:
    result = runner.invoke(app, [*args, "--input-size", "64,64", "--weights", "none"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


SWIN_LAYERS = "layers.0.blocks.0.attn,layers.0.blocks.1.attn.qkv,layers.0.blocks.0.attn.softmax"


@pytest.mark.slow
def test_a_swin_run_gives_each_image_the_same_grid_and_statistics_at_any_batch_size(
    arch: tuple[Path, Path], tmp_path: Path
) -> None:
    factory, photos = arch
    for b in ("1", "3"):
        _invoke("run", f"{factory}:swin", str(photos), "-l", SWIN_LAYERS, "-b", b,
                "-o", str(tmp_path / b))  # fmt: skip
    one, three = (run_images(tmp_path / b) for b in ("1", "3"))
    assert [im["path"] for im in one] == [im["path"] for im in three]
    for a, b in zip(one, three, strict=True):
        layers = {x["name"]: x for x in b["layers"]}
        assert layers["layers.0.blocks.0.attn"]["shape"] == [1, 16, 16, 16]
        assert (
            "reassembled into the image's 16 x 16 grid" in layers["layers.0.blocks.0.attn"]["note"]
        )
        assert layers["layers.0.blocks.0.attn"]["channels_total"] == 16
        assert layers["layers.0.blocks.0.attn.softmax"]["layout"] == "none"
        for x, y in zip(a["layers"], b["layers"], strict=True):
            assert x["name"] == y["name"] and x["note"] == y["note"]
            assert same_up_to_batching(x["stats"], y["stats"]), x["name"]
    stats = [json.loads((tmp_path / b / "stats.json").read_text()) for b in ("1", "3")]
    assert same_up_to_batching(stats[0]["images"], stats[1]["images"])
    # The three photos differ, and so do their grids' figures.
    means = {
        x["mean"] for im in three for x in im["layers"] if x["name"] == "layers.0.blocks.0.attn"
    }
    assert len(means) == 3


@pytest.mark.slow
def test_top_images_ranks_swin_windows_the_same_at_any_batch_size(
    arch: tuple[Path, Path], tmp_path: Path
) -> None:
    factory, photos = arch
    for b in ("1", "2"):
        _invoke("top-images", f"{factory}:swin", str(photos), "-l", SWIN_LAYERS, "-b", b, "-k",
                "2", "-o", str(tmp_path / b))  # fmt: skip
    docs = [json.loads((tmp_path / b / "top-images.json").read_text()) for b in ("1", "2")]
    ranked = [x["name"] for x in docs[0]["layers"]]
    assert ranked == ["layers.0.blocks.0.attn", "layers.0.blocks.1.attn.qkv"]
    assert docs[0]["layers"][0]["maps"] == [16, 16, 16]
    assert [u["layer"] for u in docs[0]["unranked"]] == ["layers.0.blocks.0.attn.softmax"]
    assert same_up_to_batching(docs[0]["layers"], docs[1]["layers"])


@pytest.mark.slow
def test_a_layer_whose_rows_are_not_the_images_is_listed_not_drawn(
    arch: tuple[Path, Path], tmp_path: Path
) -> None:
    factory, photos = arch
    _invoke("run", f"{factory}:quartered", str(photos), "-l", "conv,cut", "-b", "2",
            "-o", str(tmp_path / "run"))  # fmt: skip
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    (undrawn,) = manifest["undrawable"]
    assert undrawn["layer"] == "cut" and "4 rows per image" in undrawn["reason"]
    assert "cannot be attributed to images" in undrawn["reason"]
    for image in run_images(tmp_path / "run"):
        conv, cut = image["layers"]
        assert conv["file"] and conv["shape"] == [1, 4, 64, 64]
        assert cut["file"] is None and cut["layout"] == "none" and cut["stats"] is None
        assert cut["shape"] == [1, 4, 32, 32] and cut["note"] == undrawn["reason"]
    _invoke("top-images", f"{factory}:quartered", str(photos), "-l", "conv,cut", "-b", "2",
            "-o", str(tmp_path / "top"))  # fmt: skip
    doc = json.loads((tmp_path / "top" / "top-images.json").read_text())
    assert [x["name"] for x in doc["layers"]] == ["conv"]
    (unranked,) = doc["unranked"]
    assert unranked["layer"] == "cut" and "cannot be attributed" in unranked["reason"]


class WithTable(nn.Module):
    """A module whose output has no batch dimension: the same table for every image."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 1)
        self.table = nn.Identity()
        self.weights = nn.Parameter(torch.randn(5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3)) @ self.table(self.weights)


@pytest.mark.parametrize("batch", [2, 3])
def test_a_tensor_without_a_batch_dimension_is_refused_whatever_the_batch(batch: int) -> None:
    caps = _capture(WithTable().eval(), ["conv", "table"], torch.randn(batch, 3, 4, 4))
    table = caps["table"]
    assert table.refused == (
        "its first dimension (5 rows of (3,)) does not follow the images of the batch (a tensor "
        "shared by the batch, or rows in another order); its rows cannot be attributed to "
        "images, so it is not drawn"
    )
    assert table.tensor.shape == (batch, 0) and caps["conv"].refused is None


@pytest.mark.parametrize("stop_early", [False, True])
def test_gradients_of_windows_are_each_images_grid(stop_early: bool) -> None:
    from actviz.gradients.recorder import GradientRecorder

    model = _timm_swin()
    names = ["layers.0.blocks.1.attn", "layers.0.blocks.1.norm1"]

    def gradients(x: torch.Tensor) -> dict[str, Any]:
        with GradientRecorder(model, names) as rec:
            x = x.clone().requires_grad_(True)
            rec.backward(model(x)[:, 0].sum(), x, stop_early=stop_early)
            return {c.key: c for c in rec.captures}

    x = torch.randn(3, 3, 64, 64)
    batch = gradients(x)
    attn = batch["layers.0.blocks.1.attn"]
    assert attn.activation.shape == attn.gradient.shape == (3, 16, 16, 16)
    assert len(attn.norms) == 3
    # The activation is the block's own attention result on its normalized map.
    block = model.layers[0].blocks[1]
    with torch.inference_mode():
        expected = block._attn(batch["layers.0.blocks.1.norm1"].activation)
    torch.testing.assert_close(attn.activation, expected, rtol=1e-5, atol=1e-6)
    for i in range(3):  # each image's logit depends on its own rows only
        alone = gradients(x[i : i + 1])["layers.0.blocks.1.attn"]
        rms = float(alone.gradient.square().mean().sqrt())
        torch.testing.assert_close(
            attn.gradient[i : i + 1], alone.gradient, rtol=1e-5, atol=REBATCH_SCALE * rms
        )


def test_a_gradient_whose_rows_are_not_the_images_is_skipped_with_the_reason() -> None:
    from actviz.gradients.recorder import GradientRecorder

    model = Quartered().eval()
    with GradientRecorder(model, ["conv", "cut"]) as rec:
        x = torch.randn(2, 3, 8, 8, requires_grad=True)
        rec.backward(model(x).sum(), x)
        assert [c.key for c in rec.captures] == ["conv"]
    (skipped,) = rec.skipped
    assert skipped.key == "cut" and "4 rows per image" in skipped.reason


@pytest.mark.slow
def test_diff_lists_a_layer_whose_rows_are_not_the_images_as_not_compared(
    arch: tuple[Path, Path], tmp_path: Path
) -> None:
    factory, photos = arch
    _invoke("diff", f"{factory}:quartered", str(photos), "--against-model",
            f"{factory}:quartered", "-l", "conv,cut", "-o", str(tmp_path))  # fmt: skip
    layers = {x["name"]: x for x in json.loads((tmp_path / "diff.json").read_text())["layers"]}
    assert layers["conv"]["cosine"] == pytest.approx(1.0)
    cut = layers["cut"]
    assert cut["cka"] is None and cut["cosine"] is None and cut["rel_l2"] is None
    assert cut["note"].startswith("not compared: its first dimension holds 4 rows per image")


@pytest.mark.slow
def test_a_hugging_face_swin_run_is_the_same_at_any_batch_size(
    arch: tuple[Path, Path], tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.SwinConfig(
        image_size=64, patch_size=4, embed_dim=16, depths=[2], num_heads=[2], window_size=4,
        num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.SwinForImageClassification(config).save_pretrained(tmp_path / "swin")
    _, photos = arch
    selector = r"re:blocks\.1\.attention\.(o_proj|output)$"
    for b in ("1", "3"):
        _invoke("run", f"hf:{tmp_path / 'swin'}", str(photos), "-l", selector, "-b", b,
                "-o", str(tmp_path / b))  # fmt: skip
    one, three = (run_images(tmp_path / b) for b in ("1", "3"))
    for a, b in zip(one, three, strict=True):
        ((x,), (y,)) = (a["layers"], b["layers"])
        assert x["shape"] == [1, 16, 16, 16] and x["file"]
        assert x["note"].startswith("16 window(s) of 4 x 4 reassembled into the image's 16 x 16")
        assert same_up_to_batching(x["stats"], y["stats"]) and x["note"] == y["note"]
    assert len({json.dumps(im["layers"][0]["stats"]) for im in three}) == 3  # three photos
