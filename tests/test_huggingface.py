"""Hugging Face transformers as a model source: save_pretrained folders from tiny configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from actviz.errors import CheckpointError, UnknownModelError, UsageError
from actviz.hooks import layer_refs
from actviz.layouts import layer_contexts, to_drawable
from actviz.models import list_layers, load_model
from actviz.models.preprocessing import PreprocessingWarning
from actviz.selectors import select_layers
from tests.conftest import run_images

transformers = pytest.importorskip("transformers")

LABELS = {0: "cat", 1: "dog", 2: "fox"}


@pytest.fixture
def photo() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 256, size=(50, 70, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _vit(folder: Path, *, processor: bool = True) -> torch.nn.Module:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    torch.manual_seed(1)
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(folder)
    if processor:
        transformers.ViTImageProcessor(
            size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.4]
        ).save_pretrained(folder)
    return model


@pytest.fixture
def vit_folder(tmp_path: Path) -> Path:
    _vit(tmp_path / "vit")
    return tmp_path / "vit"


def test_a_classifier_folder_loads_with_its_weights_labels_and_processor(
    tmp_path: Path, photo: Image.Image
) -> None:
    original = _vit(tmp_path / "vit")
    loaded = load_model(f"hf:{tmp_path / 'vit'}", device="cpu")
    assert loaded.source == "hf" and loaded.classifier
    assert loaded.weights.source == "pretrained" and not loaded.weights.random
    assert loaded.categories == ["cat", "dog", "fox"]
    assert loaded.versions == {"transformers": transformers.__version__}

    # The image processor's own output on the same image, as transformers gives it by default.
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "vit")
    theirs = processor(photo, return_tensors="pt")["pixel_values"][0]
    ours = loaded.preprocess(photo)
    assert ours.shape == theirs.shape == (3, 32, 32)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert loaded.preprocess.record()["from"].startswith("ViTImageProcessor from ")

    # The forward returns the logits tensor, module names are named_modules()'s.
    x = ours[None]
    with torch.inference_mode():
        assert torch.allclose(loaded.module(x), original(pixel_values=x).logits)
    assert type(loaded.module).__name__ == "ViTForImageClassification"
    assert "vit.layers.0" in dict(loaded.module.named_modules())


def test_vit_tokens_are_laid_out_from_the_model(vit_folder: Path) -> None:
    loaded = load_model(f"hf:{vit_folder}", device="cpu")
    contexts = layer_contexts(loaded.module, loaded.input_size)
    captured: dict[str, torch.Tensor] = {}
    block = loaded.module.get_submodule("vit.layers.0")
    handle = block.register_forward_hook(lambda m, i, o: captured.setdefault("out", o))
    try:
        with torch.inference_mode():
            loaded.module(torch.zeros(1, 3, 32, 32))
    finally:
        handle.remove()
    out = captured["out"]
    out = out[0] if isinstance(out, tuple) else out
    drawable = to_drawable(out[0], contexts["vit.layers.0"])
    assert drawable.drawn_shape == (32, 4, 4)
    assert drawable.note == "class token dropped; 16 patch tokens as 4 x 4"


def test_a_folder_without_a_processor_says_which_defaults(tmp_path: Path) -> None:
    _vit(tmp_path / "bare", processor=False)
    with pytest.warns(PreprocessingWarning, match="has no preprocessor_config.json"):
        loaded = load_model(f"hf:{tmp_path / 'bare'}", device="cpu")
    assert loaded.input_size == (32, 32)
    origin = loaded.preprocess.record()["from"]
    assert "no preprocessor_config.json" in origin and "ImageNet mean and std" in origin
    assert loaded.preprocess.mean == (0.485, 0.456, 0.406)


def test_a_backbone_with_registers(tmp_path: Path) -> None:
    config = transformers.Dinov2WithRegistersConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=28,
        patch_size=7,
        num_register_tokens=4,
    )
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "dino")
    transformers.BitImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28}
    ).save_pretrained(tmp_path / "dino")
    loaded = load_model(f"hf:{tmp_path / 'dino'}", device="cpu")
    assert not loaded.classifier and loaded.categories is None
    assert loaded.input_size == (28, 28) and loaded.preprocess.resize_size == 32
    contexts = layer_contexts(loaded.module, loaded.input_size)
    assert contexts["encoder.layer.1"].prefix_tokens == 5
    assert contexts["encoder.layer.1"].token_grid == (4, 4)
    with torch.inference_mode():
        hidden = loaded.module(torch.zeros(1, 3, 28, 28))
    assert hidden.shape == (1, 5 + 16, 32)
    drawable = to_drawable(hidden[0], contexts["encoder.layer.1"])
    assert drawable.drawn_shape == (32, 4, 4)
    assert drawable.note == "5 prefix tokens dropped; 16 patch tokens as 4 x 4"


def test_weights_none_and_a_checkpoint_file(tmp_path: Path, vit_folder: Path) -> None:
    from safetensors.torch import save_file

    random = load_model(f"hf:{vit_folder}", weights="none", device="cpu")
    assert random.weights.random and random.weights.spec == "none"
    tuned = _vit(tmp_path / "other")
    save_file(tuned.state_dict(), str(tmp_path / "tuned.safetensors"))
    loaded = load_model(f"hf:{vit_folder}", weights=str(tmp_path / "tuned.safetensors"))
    assert loaded.weights.source == "checkpoint"
    assert torch.equal(loaded.module.classifier.weight, tuned.classifier.weight)


def test_list_layers_on_the_meta_device(vit_folder: Path) -> None:
    listing = list_layers(f"hf:{vit_folder}", layers="vit.layers.*")
    shapes = {row.name: row.shape for row in listing.layers}
    assert listing.input_shape == (1, 3, 32, 32)
    assert shapes["vit.layers.0"] == (1, 17, 32) and shapes["classifier"] == (1, 3)


def test_bad_folders_and_names_are_one_line_usage_errors(tmp_path: Path, vit_folder: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnknownModelError, match="has no config.json"):
        load_model(f"hf:{tmp_path / 'empty'}", device="cpu")
    with pytest.raises(UnknownModelError, match="hf download nobody/nothing"):
        load_model("hf:nobody/nothing", device="cpu")
    text = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    text.save_pretrained(tmp_path / "bert")
    with pytest.raises(UnknownModelError, match="not a vision model"):
        load_model(f"hf:{tmp_path / 'bert'}", device="cpu")
    odd = json.loads((vit_folder / "config.json").read_text())
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({**odd, "model_type": "no_such"}))
    with pytest.raises(UnknownModelError, match="cannot read the config"):
        load_model(f"hf:{tmp_path / 'odd'}", device="cpu")
    # Weights of another architecture in the folder.
    convnext = transformers.ConvNextConfig(
        num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3, image_size=32
    )
    transformers.ConvNextForImageClassification(convnext).save_pretrained(tmp_path / "cn")
    (tmp_path / "cn" / "config.json").write_text((vit_folder / "config.json").read_text())
    with pytest.raises(CheckpointError):
        load_model(f"hf:{tmp_path / 'cn'}", device="cpu")


def test_without_transformers_the_error_gives_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UsageError, match=r"pip install 'actviz\[hf\]'"):
        load_model("hf:some/model", device="cpu")


def test_cli_run_with_cam_and_top5(tmp_path: Path, vit_folder: Path, image_file: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", f"hf:{vit_folder}", str(image_file), "--out", str(out), "--cam"]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    info = manifest["model_info"]
    assert info["source"] == "hf" and info["preprocessing"]["resize"] == {"height": 32, "width": 32}
    assert info["preprocessing"]["crop"] is None and info["preprocessing"]["std"] == [0.2, 0.3, 0.4]
    assert info["preprocessing"]["by"] == "image processor"
    assert info["preprocessing"]["processor"] == "ViTImageProcessor"
    assert info["preprocessing"]["backend"] == "torchvision"
    assert manifest["images"]["ok"] == 1
    assert [p["label"] for p in run_images(out)[0]["predictions"]][:1][0] in LABELS.values()
    assert manifest["layers"] == [
        "vit.embeddings.patch_embeddings.projection",
        "vit.layers.0",
        "vit.layers.1",
    ]
    # The CAM layer is the last one whose patch tokens reach the class token.
    cams = sorted(p.name for p in (out / image_file.stem).glob("*_cam.png"))
    assert cams == ["01_vit.layers.0_cam.png"]
    cam = np.asarray(Image.open(out / image_file.stem / cams[0]))
    assert cam.std() > 0


def test_attention_maps_are_the_models_own_weights(vit_folder: Path) -> None:
    from actviz.hooks import ActivationRecorder

    loaded = load_model(f"hf:{vit_folder}", device="cpu")
    config = loaded.module.config
    chosen = config._attn_implementation
    x = torch.randn(1, 3, 32, 32)
    layer = "vit.layers.1.attention"
    with ActivationRecorder(loaded.module, [layer], mode="attn") as rec, torch.no_grad():
        loaded.module(x)
    assert config._attn_implementation == chosen
    maps = rec[f"{layer}<attn>"]
    reference = transformers.ViTForImageClassification.from_pretrained(
        vit_folder, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        theirs = reference(pixel_values=x, output_attentions=True).attentions[1]
    assert maps.shape == (1, 2, 4, 4)
    assert torch.allclose(maps, theirs[:, :, 0, 1:].reshape(1, 2, 4, 4), atol=1e-5)


def test_swin_stages_follow_the_merged_patch_grid(tmp_path: Path) -> None:
    from actviz.hooks import ActivationRecorder

    config = transformers.SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=8,
        depths=[1, 1],
        num_heads=[1, 1],
        window_size=2,
        num_labels=3,
    )
    transformers.SwinForImageClassification(config).save_pretrained(tmp_path / "swin")
    loaded = load_model(f"hf:{tmp_path / 'swin'}", device="cpu")
    contexts = layer_contexts(loaded.module, loaded.input_size)
    names = ["swin.encoder.layers.0.blocks.0", "swin.encoder.layers.0"]
    with ActivationRecorder(loaded.module, names) as rec, torch.no_grad():
        loaded.module(torch.zeros(1, 3, 32, 32))
    block = to_drawable(rec[f"{names[0]}[0]"][0], contexts[names[0]])
    assert block.drawn_shape == (8, 8, 8) and block.note == "64 patch tokens as 8 x 8"
    stage = to_drawable(rec[f"{names[1]}[0]"][0], contexts[names[1]])
    assert stage.drawn_shape == (16, 4, 4)
    assert stage.note == "16 patch tokens as 4 x 4 (patches merged 2x)"


def _attention_taps(model: torch.nn.Module) -> list[str]:
    """The modules ``--capture attn`` draws: timm's and Hugging Face's attention layers."""
    from actviz.attention import find_weights_tap

    return [
        name
        for name, module in model.named_modules()
        if (tap := find_weights_tap(module)) is not None and tap.attention is module
    ]


def test_attn_alias_selects_hugging_faces_self_attention_not_its_wrapper() -> None:
    config = transformers.ViTConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=32,
        patch_size=8,
    )
    model = transformers.ViTForImageClassification(config)
    chosen = select_layers(layer_refs(model), "attn", model="hf:vit")
    assert len(chosen) == 2 and chosen == _attention_taps(model)
    # The attention module drawn, not a wrapper around it.
    modules = dict(model.named_modules())
    inner = [
        child
        for name in chosen
        for child in modules[name].modules()
        if child is not modules[name] and type(child).__name__.endswith("Attention")
    ]
    assert inner == []
