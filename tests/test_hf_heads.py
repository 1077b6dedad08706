"""Hugging Face models beyond ViT classifiers, and their image processors called as they are:
pixel values equal the processor's, activations equal transformers' own forward, heads load as
what they are (segmentation maps drawn, detection heads run and named), defaults by role."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from actviz.models import list_layers, load_model
from actviz.models.defaults import default_selector
from tests.conftest import make_image, run_images

transformers = pytest.importorskip("transformers")

LABELS = {0: "sky", 1: "road", 2: "tree"}
TOKENS = {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32}


def _labelled(config: Any) -> Any:
    config.id2label = dict(LABELS)
    config.label2id = {v: k for k, v in LABELS.items()}
    return config


def _vit() -> Any:
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_hidden_layers=1, **TOKENS)
    return transformers.ViTForImageClassification(_labelled(config))


def _convnext() -> Any:
    config = transformers.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1])
    return transformers.ConvNextForImageClassification(_labelled(config))


def _swin() -> Any:
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=4
    )
    return transformers.SwinForImageClassification(_labelled(config))


def _segformer() -> Any:
    config = transformers.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        patch_sizes=[7, 3],
        strides=[4, 2],
        decoder_hidden_size=16,
    )
    return transformers.SegformerForSemanticSegmentation(_labelled(config))


def _detr() -> Any:
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"]
    )
    config = transformers.DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        num_queries=5,
    )
    return transformers.DetrForObjectDetection(_labelled(config))


def _yolos() -> Any:
    config = transformers.YolosConfig(
        image_size=[32, 32], patch_size=8, num_hidden_layers=1, num_detection_tokens=5, **TOKENS
    )
    return transformers.YolosForObjectDetection(_labelled(config))


def _dinov2() -> Any:
    config = transformers.Dinov2Config(
        image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2
    )
    return transformers.Dinov2ForImageClassification(_labelled(config))


def _saved(folder: Path, build: Callable[[], Any], processor: Any) -> Any:
    torch.manual_seed(0)
    model = build().eval()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model


EDGES = {"shortest_edge": 40, "longest_edge": 64}
PROCESSORS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "vit": (_vit, lambda: transformers.ViTImageProcessor(size={"height": 32, "width": 32})),
    "convnext": (
        _convnext,
        lambda: transformers.ConvNextImageProcessor(size={"shortest_edge": 32}),
    ),
    "detr": (_detr, lambda: transformers.DetrImageProcessor(size=EDGES)),
    "yolos": (_yolos, lambda: transformers.YolosImageProcessor(size=EDGES)),
}


def _photo(width: int, height: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _load(folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model(f"hf:{folder}", device="cpu")


@pytest.mark.parametrize("kind", sorted(PROCESSORS))
def test_pixels_and_activations_are_the_processors_and_transformers_own(
    tmp_path: Path, kind: str
) -> None:
    build, make_processor = PROCESSORS[kind]
    original = _saved(tmp_path / kind, build, make_processor())
    loaded = _load(tmp_path / kind)
    # What pipeline() runs: the processor transformers gives by default (no backend asked).
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / kind)
    assert processor.backend == "torchvision"
    photo = _photo(70, 50)
    theirs = processor(images=photo, return_tensors="pt")["pixel_values"]
    ours = loaded.preprocess(photo)
    assert ours.dtype == torch.float32 and torch.equal(ours, theirs[0])

    captured: dict[str, torch.Tensor] = {}
    layer = next(n for n, m in original.named_modules() if isinstance(m, torch.nn.Conv2d))
    for name, model in (("ours", loaded.module), ("theirs", original)):
        hook = model.get_submodule(layer).register_forward_hook(
            lambda _m, _i, out, name=name: captured.__setitem__(name, out.detach().clone())
        )
        with torch.inference_mode():
            out = model(ours[None]) if name == "ours" else model(pixel_values=theirs).logits
        hook.remove()
        captured[name + " logits"] = out
    assert torch.equal(captured["ours"], captured["theirs"])
    assert torch.equal(captured["ours logits"], captured["theirs logits"])

    record = loaded.record()["preprocessing"]
    assert record["by"] == "image processor"
    assert record["processor"] == type(processor).__name__
    assert record["backend"] == "torchvision"
    assert record["from"].endswith("called on each image (its torchvision backend)")


@pytest.mark.parametrize("kind", ["detr", "yolos"])
def test_shortest_edge_processors_keep_the_aspect_ratio_and_run_one_image_at_a_time(
    tmp_path: Path, kind: str
) -> None:
    from actviz.io.loader import decode_batches

    build, make_processor = PROCESSORS[kind]
    _saved(tmp_path / kind, build, make_processor())
    loaded = _load(tmp_path / kind)
    wide, tall = _photo(70, 50), _photo(30, 60, seed=1)
    # Shorter side to 40 (YOLOS then rounds both sides down to a multiple of 16); the longer
    # side follows the image: the input is not squashed to a square.
    _, height, width = loaded.preprocess(wide).shape
    assert (height, width) == ((40, 56) if kind == "detr" else (32, 48))
    _, height, width = loaded.preprocess(tall).shape
    assert (height, width) == ((64, 32) if kind == "detr" else (64, 32))
    if kind == "detr":
        assert loaded.preprocess.fit((70, 50)).resized == (56, 40)
        assert loaded.preprocess.fit((30, 60)).resized == (32, 64)  # longest_edge caps it
    record = loaded.record()["preprocessing"]
    assert record["keeps_aspect_ratio"] is True and record["resize"] == EDGES
    assert record["batching"].startswith("one image per forward where input shapes differ")

    paths = [tmp_path / f"{i}.png" for i in range(3)]
    for path, photo in zip(paths, (wide, tall, wide), strict=True):
        photo.save(path)
    batches = list(decode_batches(paths, loaded.preprocess, batch_size=3))
    shapes = [[tuple(d.tensor.shape) for d in b if d.tensor is not None] for b in batches]
    assert [len(s) for s in shapes] == [1, 1, 1]  # never padded together


def test_swin_and_convnext_default_to_their_stages(tmp_path: Path) -> None:
    swin, convnext = _swin().eval(), _convnext().eval()
    assert default_selector(swin) == r"re:^swin\.encoder\.layers\.\d+$"
    assert default_selector(convnext) == r"re:^convnext\.encoder\.stages\.\d+$"
    # A ResNet's stages hold batch norms only: its convolutions stay the default.
    resnet = transformers.ResNetForImageClassification(
        transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    )
    assert default_selector(resnet) == "conv"


def test_segformer_is_a_segmentation_model_with_a_class_map(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app

    folder = tmp_path / "segformer"
    processor = transformers.SegformerImageProcessor(size={"height": 64, "width": 64})
    _saved(folder, _segformer, processor)
    loaded = _load(folder)
    assert type(loaded.module).__name__ == "SegformerForSemanticSegmentation"
    assert loaded.segmentation == "decode_head.classifier"
    assert loaded.classifier  # class scores per pixel, as torchvision's segmentation models
    assert loaded.categories == ["sky", "road", "tree"]
    assert loaded.channel_names == {"decode_head.classifier": ["sky", "road", "tree"]}

    image = make_image(tmp_path / "in" / "x.png", size=(80, 60))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", f"hf:{folder}", str(image), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    # Its stages (hierarchical, LayerNorm-normalized) and the class logits the map is drawn from.
    assert manifest["selector"] == r"re:^segformer\.stages\.\d+$,decode_head.classifier"
    record = run_images(out)[0]
    head = next(x for x in record["layers"] if x["name"] == "decode_head.classifier")
    assert head["shape"] == [1, 3, 16, 16]  # the logits at a quarter of the 64 x 64 input
    picture = np.asarray(Image.open(out / "x" / "segmentation.png").convert("RGB"))
    view = np.asarray(Image.open(out / "x" / "input.png").convert("RGB"))
    body = picture[-view.shape[0] :, : view.shape[1]].astype(int)
    assert np.abs(body - view).mean() > 5 and body.std() > 1


@pytest.mark.parametrize("kind", ["detr", "yolos"])
def test_detection_models_load_with_their_heads_and_say_so(tmp_path: Path, kind: str) -> None:
    build, make_processor = PROCESSORS[kind]
    original = _saved(tmp_path / kind, build, make_processor())
    with pytest.warns(UserWarning) as caught:
        loaded = load_model(f"hf:{tmp_path / kind}", device="cpu")
    assert type(loaded.module).__name__ == type(original).__name__
    assert loaded.weights.source == "pretrained" and not loaded.classifier
    for name, tensor in original.state_dict().items():  # the head's weights as saved
        assert torch.equal(loaded.module.state_dict()[name], tensor), name
    lines = [str(w.message) for w in caught if "detection" in str(w.message)]
    assert len(lines) == 1
    assert (
        f"is a {type(original).__name__}: drawing its detections is not supported yet" in (lines[0])
    )
    assert "the backbone's feature maps are drawn" in lines[0]


def test_detr_runs_from_the_cli_with_its_backbone_drawn(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app

    _saved(tmp_path / "detr", _detr, PROCESSORS["detr"][1]())
    image = make_image(tmp_path / "in" / "x.png", size=(70, 50))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", f"hf:{tmp_path / 'detr'}", str(image), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "drawing its detections is not supported yet" in result.output
    # Its layers list on the CPU where the meta device cannot run it (DETR reads its mask).
    listing = list_layers(f"hf:{tmp_path / 'detr'}", layers="conv")
    shapes = {row.name: row.shape for row in listing.layers}
    assert shapes["model.input_projection"] == (1, 16, 28, 28)  # stride 8 at 224 x 224
    manifest = json.loads((out / "manifest.json").read_text())
    assert any(name.startswith("model.backbone.") for name in manifest["layers"])
    record = run_images(out)[0]
    stem = next(x for x in record["layers"] if x["name"].startswith("model.backbone."))
    assert stem["shape"][2:] == [20, 28]  # a stride-2 stem on the 40 x 56 input, not a square


def test_dinov2_cam_is_where_patch_tokens_reach_its_readout(tmp_path: Path) -> None:
    from actviz.contexts import layer_contexts
    from actviz.gradients import choose_cam_keys
    from actviz.gradients.batch import patches_reach_readout

    folder = tmp_path / "dinov2"
    processor = transformers.BitImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    _saved(folder, _dinov2, processor)
    loaded = _load(folder)
    contexts = layer_contexts(loaded.module, (32, 32))
    # The classifier reads the class token and the mean of the final norm's patch tokens.
    assert patches_reach_readout("dinov2.layernorm", contexts)
    assert patches_reach_readout("dinov2.encoder.layer.1", contexts)

    class Cap:
        def __init__(self, module: str) -> None:
            self.module, self.key, self.kind, self.shape = module, module, "output", (1, 17, 16)

    captures = [Cap(f"dinov2.encoder.layer.{i}") for i in range(2)]
    assert choose_cam_keys(captures, contexts, explicit=False) == {"dinov2.encoder.layer.1"}
    # A ViT that reads its class token alone keeps the block before the last.
    vit = _vit().eval()
    vit_contexts = layer_contexts(vit, (32, 32))
    assert not patches_reach_readout("vit.layernorm", vit_contexts)


def test_swin_cam_defaults_to_its_last_stage(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app

    folder = tmp_path / "swin"
    _saved(folder, _swin, transformers.ViTImageProcessor(size={"height": 32, "width": 32}))
    image = make_image(tmp_path / "in" / "x.png", size=(48, 40))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", f"hf:{folder}", str(image), "-o", str(out), "--cam"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layers"] == ["swin.encoder.layers.0", "swin.encoder.layers.1"]
    # A Swin stage returns a tuple: its gradient is taken per tensor, and the map is drawn
    # from the last stage (its tokens are pooled into the classifier).
    cams = sorted(p.name for p in (out / "x").glob("*_cam.png"))
    assert len(cams) == 1 and "swin.encoder.layers.1" in cams[0]
    assert np.asarray(Image.open(out / "x" / cams[0])).std() > 0


def test_processor_preprocessing_pickles_and_input_size_is_said_to_be_approximate(
    tmp_path: Path,
) -> None:
    import pickle

    folder = tmp_path / "vit"
    _saved(folder, PROCESSORS["vit"][0], PROCESSORS["vit"][1]())
    loaded = _load(folder)
    photo = _photo(70, 50)
    # DataLoader workers get a pickled copy: it gives the same pixels.
    copy = pickle.loads(pickle.dumps(loaded.preprocess))
    assert copy == loaded.preprocess and torch.equal(copy(photo), loaded.preprocess(photo))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resized = load_model(f"hf:{folder}", device="cpu", weights="none", input_size=(48, 48))
    assert tuple(resized.preprocess(photo).shape) == (3, 48, 48)
    record = resized.record()["preprocessing"]
    assert "followed with torchvision transforms for --input-size" in record["from"]
    assert "not bit-exact" in record["from"] and "by" not in record
