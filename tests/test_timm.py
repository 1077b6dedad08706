"""timm as a model source: names, weights offline, preprocessing, classes and token layouts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from actviz.errors import UnknownModelError, UsageError, WeightsError
from actviz.hooks import layer_refs
from actviz.layouts import layer_contexts, to_drawable
from actviz.models import list_layers, load_model
from actviz.selectors import select_layers
from tests.conftest import run_images
from tests.oracles import list_model_names

timm = pytest.importorskip("timm")


@pytest.fixture
def photo() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 256, size=(90, 130, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def test_names_are_timm_names_with_the_hub_prefix() -> None:
    names = list_model_names("convnext_t*", source="timm")
    assert names == ["timm/convnext_tiny", "timm/convnext_tiny_hnf"]
    tags = list_model_names("test_vit.*", source="timm", include_all=True)
    assert "timm/test_vit.r160_in1k" in tags


def test_an_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(UnknownModelError, match=r"did you mean timm/convnext_tiny"):
        load_model("timm/convnxt_tiny", weights="none", device="cpu")
    with pytest.raises(UnknownModelError, match=r"unknown tag 'nope'.*fb_in1k"):
        load_model("timm/convnext_tiny.nope", weights="none", device="cpu")


def test_preprocessing_is_timms_own_transform(photo: Image.Image) -> None:
    from timm.data import create_transform, resolve_data_config

    loaded = load_model("timm/test_convnext", weights="none", device="cpu")
    theirs = create_transform(**resolve_data_config({}, model=loaded.module))
    ours = loaded.preprocess(photo)
    assert ours.shape == (3, 160, 160)
    assert torch.allclose(ours, theirs(photo), atol=1e-6)
    assert loaded.preprocess.interpolation == "bicubic"
    assert loaded.preprocess.record()["from"] == "timm pretrained_cfg of test_convnext"
    assert loaded.source == "timm" and loaded.versions == {"timm": timm.__version__}


def test_class_names_come_from_timms_imagenet_info() -> None:
    loaded = load_model("timm/test_vit", weights="none", device="cpu")
    assert loaded.classifier
    assert loaded.categories is not None and len(loaded.categories) == 1000
    assert loaded.categories[0].startswith("tench")


def test_auto_without_a_cache_is_random_with_the_command_that_fetches_it() -> None:
    loaded = load_model("timm/test_vit.r160_in1k", device="cpu")
    assert loaded.weights.random
    assert "hf download timm/test_vit.r160_in1k" in (loaded.weights.reason or "")
    with pytest.raises(WeightsError, match="not cached"):
        load_model("timm/test_vit.r160_in1k", weights="default", device="cpu")


def test_cached_pretrained_weights_are_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub
    from safetensors.torch import save_file

    torch.manual_seed(7)
    source = timm.create_model("test_vit.r160_in1k", pretrained=False)
    save_file(source.state_dict(), str(tmp_path / "model.safetensors"))
    asked: list[tuple[str, str]] = []

    def cached(repo_id: str, filename: str, **_: object) -> str | None:
        asked.append((repo_id, filename))
        return str(tmp_path / filename) if filename == "model.safetensors" else None

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", cached)
    loaded = load_model("timm/test_vit.r160_in1k", weights="default", device="cpu")
    assert asked[0] == ("timm/test_vit.r160_in1k", "model.safetensors")
    assert loaded.weights.source == "pretrained"
    assert loaded.weights.name == "timm/test_vit.r160_in1k"
    assert torch.equal(loaded.module.head.weight, source.head.weight)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_checkpoint_file_with_its_own_head(tmp_path: Path, suffix: str) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(3)
    tuned = timm.create_model("test_efficientnet", pretrained=False, num_classes=5)
    path = tmp_path / f"tuned{suffix}"
    if suffix == ".pt":
        torch.save(tuned.state_dict(), path)
    else:
        save_file(tuned.state_dict(), str(path))
    loaded = load_model("timm/test_efficientnet", weights=str(path), device="cpu")
    assert loaded.weights.source == "checkpoint"
    assert loaded.module.get_classifier().out_features == 5
    assert loaded.categories is None  # ImageNet's names would lie about a 5-class head
    x = torch.zeros(1, 3, 64, 64)
    assert torch.equal(loaded.module(x), tuned.eval()(x))


def test_a_backbone_with_register_tokens_lays_out_its_patch_grid() -> None:
    loaded = load_model(
        "timm/vit_small_patch14_reg4_dinov2", weights="none", device="cpu", input_size=(56, 56)
    )
    assert not loaded.classifier and loaded.categories is None
    assert loaded.input_size == (56, 56)
    contexts = layer_contexts(loaded.module, loaded.input_size)
    assert contexts["blocks.0"].prefix_tokens == 5
    assert contexts["blocks.0"].token_grid == (4, 4)
    with torch.inference_mode():
        tokens = loaded.module.forward_features(torch.zeros(1, 3, 56, 56))
    assert tokens.shape == (1, 5 + 16, 384)
    drawable = to_drawable(tokens[0], contexts["blocks.11"])
    assert drawable.kind == "maps" and drawable.drawn_shape == (384, 4, 4)
    assert drawable.note == "5 prefix tokens dropped; 16 patch tokens as 4 x 4"
    # The class and 4 register tokens are kept for the band above each grid tile.
    assert drawable.prefix is not None and drawable.prefix.shape == (384, 5)
    np.testing.assert_array_equal(drawable.prefix, tokens[0, :5].T.numpy())


def test_list_layers_builds_on_the_meta_device() -> None:
    listing = list_layers("timm/test_vit", layers="blocks.0")
    assert listing.input_shape == (1, 3, 160, 160)
    shapes = {row.name: row.shape for row in listing.layers}
    # test_vit: patch 16 at 160 px is a 10 x 10 grid after one class token.
    assert shapes["blocks.0"] == (1, 101, 64)
    assert shapes["head"] == (1, 1000)


def test_convnext_block_insides_are_channels_last() -> None:
    loaded = load_model("timm/test_convnext", weights="none", device="cpu")
    contexts = layer_contexts(loaded.module, loaded.input_size)
    captured: dict[str, torch.Tensor] = {}
    norm = loaded.module.get_submodule("stages.1.blocks.0.norm")
    handle = norm.register_forward_hook(lambda m, i, o: captured.setdefault("norm", o))
    try:
        with torch.inference_mode():
            loaded.module(torch.zeros(1, 3, 160, 160))
    finally:
        handle.remove()
    out = captured["norm"][0]
    drawable = to_drawable(out, contexts["stages.1.blocks.0.norm"])
    assert drawable.layout == "nhwc"
    assert drawable.drawn_shape == (out.shape[2], out.shape[0], out.shape[1])


def test_without_timm_the_error_gives_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(UsageError, match=r"pip install 'actviz\[timm\]'"):
        load_model("timm/test_vit", weights="none", device="cpu")


def test_cli_runs_a_timm_model_by_its_hub_name(tmp_path: Path, image_file: Path) -> None:
    import json

    from typer.testing import CliRunner

    from actviz.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["models", "--source", "timm", "convnext_t*"])
    assert listed.exit_code == 0 and listed.stdout.split() == [
        "timm/convnext_tiny",
        "timm/convnext_tiny_hnf",
    ]

    out = tmp_path / "out"
    result = runner.invoke(
        app, ["run", "timm/test_convnext", str(image_file), "--out", str(out), "--weights", "none"]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layers"] == ["stages.0", "stages.1", "stages.2", "stages.3"]
    assert manifest["versions"]["timm"] == timm.__version__
    info = manifest["model_info"]
    assert info["source"] == "timm" and info["name"] == "timm/test_convnext"
    assert info["preprocessing"] == {
        "resize": 168,  # floor(160 / 0.95)
        "crop": [160, 160],
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
        "interpolation": "bicubic",
        "from": "timm pretrained_cfg of test_convnext",
    }
    assert len(run_images(out)[0]["predictions"]) == 5

    backbone = ["run", "timm/vit_small_patch14_reg4_dinov2", str(image_file)]
    backbone += ["--input-size", "28,28", "--weights", "none", "--out", str(tmp_path / "b")]
    result = runner.invoke(app, [*backbone, "--cam"])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "backbone without a classifier" in errors[0]
    assert not (tmp_path / "b").exists()
    result = runner.invoke(app, backbone)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["images"]["ok"] == 1
    assert run_images(tmp_path / "b")[0]["predictions"] == []
    assert manifest["layers"][:2] == ["patch_embed.proj", "blocks.0"]
    assert any("backbone without a classifier" in w for w in manifest["warnings"])


def test_attention_maps_are_timms_own_weights_with_the_fused_path_restored() -> None:
    from actviz.hooks import ActivationRecorder

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch14_reg4_dinov2", img_size=28).eval()
    attn = model.blocks[0].attn
    fused = attn.fused_attn
    x = torch.randn(1, 3, 28, 28)
    inputs: dict[str, torch.Tensor] = {}
    handle = attn.register_forward_pre_hook(lambda m, a: inputs.setdefault("x", a[0]))
    try:
        with ActivationRecorder(model, ["blocks.0.attn"], mode="attn") as rec, torch.no_grad():
            model(x)
    finally:
        handle.remove()
    assert attn.fused_attn == fused
    maps = rec["blocks.0.attn<attn>"]
    # The reference: softmax(q k^T / sqrt(d)) from the layer's own projections.
    tokens = inputs["x"]
    b, n, c = tokens.shape
    heads = attn.num_heads
    qkv = attn.qkv(tokens).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    weights = ((q @ k.transpose(-2, -1)) * attn.scale).softmax(dim=-1)
    assert maps.shape == (1, heads, 2, 2)  # 28 px / patch 14, after 1 class + 4 registers
    assert torch.allclose(maps, weights[:, :, 0, 5:].reshape(1, heads, 2, 2), atol=1e-5)


def test_top_images_of_a_backbone_name_no_predicted_class(tmp_path: Path) -> None:
    from actviz.top_images.pipeline import top_images

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(2):
        pixels = rng.integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    result = top_images(
        "timm/vit_small_patch14_reg4_dinov2",
        [folder],
        weights="none",
        input_size=(28, 28),
        layers="blocks.11",
        out=tmp_path / "out",
        report=False,
    )
    (layer,) = result.layers
    assert layer.channels == 384 and layer.selective_channel is None


def test_swin_stages_are_channels_last_maps() -> None:
    from actviz.hooks import ActivationRecorder

    loaded = load_model("timm/swin_tiny_patch4_window7_224", weights="none", device="cpu")
    contexts = layer_contexts(loaded.module, loaded.input_size)
    with ActivationRecorder(loaded.module, ["layers.0", "layers.3"]) as rec, torch.no_grad():
        loaded.module(torch.zeros(1, 3, 224, 224))
    first = to_drawable(rec["layers.0"][0], contexts["layers.0"])
    assert rec["layers.0"].shape == (1, 56, 56, 96)
    assert first.layout == "nhwc" and first.drawn_shape == (96, 56, 56)
    last = to_drawable(rec["layers.3"][0], contexts["layers.3"])
    assert last.layout == "nhwc" and last.drawn_shape == (768, 7, 7)


def test_squash_crop_mode_is_timms_own_transform(photo: Image.Image) -> None:
    from timm.data import create_transform, resolve_data_config
    from timm.data.transforms_factory import transforms_imagenet_eval

    from actviz.models.preprocessing import Preprocessing
    from actviz.models.sources.timm import TimmSource, _pretrained_cfg

    name = "convnext_tiny.fb_in22k_ft_in1k_384"
    ours = TimmSource().preprocessing(f"timm/{name}", None, input_size=None, in_chans=3)
    config = resolve_data_config({}, pretrained_cfg=dict(_pretrained_cfg(name) or {}))
    assert config["crop_mode"] == "squash"
    assert torch.allclose(ours(photo), create_transform(**config)(photo), atol=1e-6)
    # With a crop: the whole image squashed to size / crop_pct, then a centre crop.
    squash = Preprocessing.fitted(resize=80, crop=64, interpolation="bicubic", squash=True)
    theirs = transforms_imagenet_eval(
        img_size=64, crop_pct=0.8, crop_mode="squash", interpolation="bicubic"
    )
    assert torch.allclose(squash(photo), theirs(photo), atol=1e-6)
    assert squash.fit(photo.size).crop == (64, 64)


def _attention_taps(model: torch.nn.Module) -> list[str]:
    """The modules ``--capture attn`` draws: timm's and Hugging Face's attention layers."""
    from actviz.attention import find_weights_tap

    return [
        name
        for name, module in model.named_modules()
        if (tap := find_weights_tap(module)) is not None and tap.attention is module
    ]


def test_attn_alias_selects_timms_attention_layers() -> None:
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, depth=2, img_size=32, num_classes=3
    )
    chosen = select_layers(layer_refs(model), "attn", model="timm/vit_tiny_patch16_224")
    assert chosen == ["blocks.0.attn", "blocks.1.attn"] == _attention_taps(model)
