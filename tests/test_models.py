"""Model names, weights, checkpoints and devices, with files the tests write themselves."""

from __future__ import annotations

import json
import pickle
import urllib.error
from pathlib import Path

import pytest
import torch
from torchvision.models import ResNet18_Weights, ViT_B_16_Weights, resnet18

from actviz.errors import (
    CheckpointError,
    DeviceError,
    UnknownModelError,
    UsageError,
    WeightsError,
)
from actviz.models import cached_weights_path, resolve_device
from actviz.models.families import OPTICAL_FLOW, family_named
from actviz.models.registry import list_models, load_model
from tests.oracles import list_model_names


@pytest.fixture(autouse=True)
def private_torch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty weights cache, and no network, whatever machine runs the tests."""
    home = tmp_path / "torch-home"
    monkeypatch.setenv("TORCH_HOME", str(home))

    def offline(url: str, dst: str, *args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network is unreachable (test)")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    return home


def _probe() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(1, 3, 64, 64)


def _state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return resnet18().state_dict()


def test_auto_falls_back_to_random_with_the_reason() -> None:
    loaded = load_model("resnet18", weights="auto", device="cpu")
    assert loaded.weights.random
    assert loaded.weights.source == "random"
    reason = loaded.weights.reason or ""
    assert "ResNet18_Weights.IMAGENET1K_V1" in reason
    assert "network is unreachable" in reason
    assert str(cached_weights_path(ResNet18_Weights.IMAGENET1K_V1)) in reason
    assert "weights='none'" in reason  # the Python caller's spelling
    assert not loaded.module.training


def test_default_weights_are_required_and_fail_clearly() -> None:
    with pytest.raises(WeightsError) as info:
        load_model("resnet18", weights="default", device="cpu")
    message = str(info.value)
    assert "https://download.pytorch.org/models/resnet18-f37072fd.pth" in message
    assert "\n" not in message


def test_pretrained_weights_come_from_the_cache_with_safe_loading() -> None:
    staged = _state(seed=7)
    path = cached_weights_path(ResNet18_Weights.IMAGENET1K_V1)
    path.parent.mkdir(parents=True)
    torch.save(staged, path)
    loaded = load_model("resnet18", weights="IMAGENET1K_V1", device="cpu")
    assert loaded.weights.source == "pretrained"
    assert loaded.weights.name == "ResNet18_Weights.IMAGENET1K_V1"
    assert torch.equal(loaded.module.conv1.weight, staged["conv1.weight"])
    assert loaded.categories is not None and len(loaded.categories) == 1000
    assert loaded.input_size == (224, 224)


def test_unknown_weights_name_lists_the_valid_ones() -> None:
    with pytest.raises(WeightsError, match="IMAGENET1K_V1") as info:
        load_model("resnet50", weights="IMAGENET9K", device="cpu")
    assert "IMAGENET1K_V2" in str(info.value)


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "dataparallel", "safetensors"])
def test_checkpoint_formats_load_and_change_the_output(tmp_path: Path, wrap: str) -> None:
    state = _state(seed=3)
    path = tmp_path / "ckpt.pt"
    if wrap == "plain":
        torch.save(state, path)
    elif wrap in ("state_dict", "model"):
        torch.save({wrap: state, "epoch": 3}, path)
    elif wrap == "dataparallel":
        torch.save({f"module.{k}": v for k, v in state.items()}, path)
    else:
        from safetensors.torch import save_file

        path = tmp_path / "ckpt.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    loaded = load_model("resnet18", weights=str(path), device="cpu")
    assert loaded.weights.source == "checkpoint"
    assert not loaded.weights.random
    random_model = load_model("resnet18", weights="none", device="cpu").module
    reference = resnet18()
    reference.load_state_dict(state)
    reference.eval()
    with torch.inference_mode():
        got = loaded.module(_probe())
        assert torch.allclose(got, reference(_probe()))
        assert not torch.allclose(got, random_model(_probe()))


def test_checkpoint_that_does_not_fit_lists_keys(tmp_path: Path) -> None:
    state = _state(seed=0)
    state["extra.weight"] = torch.zeros(1)
    del state["fc.bias"]
    state["conv1.weight"] = torch.zeros(32, 3, 7, 7)
    path = tmp_path / "bad.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError) as info:
        load_model("resnet18", weights=str(path), device="cpu")
    message = str(info.value)
    assert "missing keys: fc.bias" in message
    assert "unexpected keys: extra.weight" in message
    assert "conv1.weight (32, 3, 7, 7) vs (64, 3, 7, 7)" in message


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("touch should-not-exist",))


def test_pickle_with_code_is_refused_and_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    with path.open("wb") as fh:
        pickle.dump({"conv1.weight": _Payload()}, fh)
    with pytest.raises(CheckpointError, match="full pickle") as info:
        load_model("resnet18", weights=str(path), device="cpu")
    assert "state_dict" in str(info.value)
    assert "posix.system" in str(info.value) or "nt.system" in str(info.value)
    assert not (tmp_path / "should-not-exist").exists()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "corrupt or unsupported.*ends too early"),
        # The unpickler trips on the first byte ("h", 104): said as what the file is not.
        (b"hello, not a checkpoint", "corrupt or unsupported.*not a file torch.save wrote"),
    ],
)
def test_corrupt_checkpoint(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_model("resnet18", weights=str(path), device="cpu")


def test_weights_that_are_neither_name_nor_file() -> None:
    with pytest.raises(WeightsError, match="neither a weights name"):
        load_model("resnet18", weights="not a name", device="cpu")


@pytest.mark.parametrize(
    "spec", ["missing.pt", "./missing.pt", "runs/best", "m.PTH", "x.ckpt", "w.bin", "w.safetensors"]
)
def test_a_missing_checkpoint_file_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeightsError) as info:
        load_model("resnet18", weights=spec, device="cpu")
    message = str(info.value)
    assert message.startswith(f"checkpoint file not found: {spec};")
    assert "check the path" in message and "IMAGENET1K_V1" in message
    assert "unknown weights" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("resnet-34", "did you mean resnet34"),
        ("resnt18", "did you mean resnet18"),
        ("zzzz", "actviz models"),
    ],
)
def test_unknown_or_unsupported_models(name: str, match: str) -> None:
    with pytest.raises(UnknownModelError, match=match):
        load_model(name, weights="none", device="cpu")


def test_devices() -> None:
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="device=.cpu."):
            resolve_device("cuda")
    else:
        with pytest.raises(DeviceError, match="does not exist"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    if not torch.backends.mps.is_available():
        with pytest.raises(DeviceError, match="MPS"):
            resolve_device("mps")


def test_model_names_filter() -> None:
    names = list_model_names("resnet*")
    assert "resnet34" in names and "resnet18" in names
    assert all(n.startswith("resnet") for n in names)
    # run takes segmentation models too, so they are listed without --all.
    default = list_model_names()
    assert {"fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"} <= set(
        default
    )
    assert default == sorted(default) and "resnet18" in default
    # Without --all, exactly the names of the families run takes.
    assert default == [e.name for e in list_models(include_all=True) if e.runnable]
    assert "fasterrcnn_resnet50_fpn" in list_model_names("fasterrcnn")
    assert "raft_small" in list_model_names("raft", include_all=True)


def test_a_fine_tuned_head_sets_the_class_count(tmp_path: Path) -> None:
    torch.manual_seed(0)
    state = resnet18(num_classes=10).state_dict()
    path = tmp_path / "finetuned.pt"
    torch.save({"model": state}, path)
    loaded = load_model("resnet18", weights=str(path), device="cpu")
    assert loaded.module.fc.out_features == 10
    assert loaded.categories is None  # ImageNet labels would lie about these 10 classes
    with torch.inference_mode():
        assert loaded.module(_probe()).shape == (1, 10)


def test_trusted_full_pickle_and_torchscript(tmp_path: Path) -> None:
    torch.manual_seed(5)
    model = resnet18().eval()
    whole = tmp_path / "whole.pt"
    torch.save(model, whole)
    with pytest.raises(CheckpointError, match="trust_checkpoint=True") as info:
        load_model("resnet18", weights=str(whole), device="cpu")
    assert "torchvision.models.resnet.ResNet" in str(info.value)
    loaded = load_model("resnet18", weights=str(whole), device="cpu", trust_checkpoint=True)
    assert torch.equal(loaded.module.conv1.weight, model.conv1.weight)


def test_preprocessing_matches_torchvision_presets() -> None:
    from PIL import Image

    from actviz.models.sources.torchvision import weights_preprocessing

    rng = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (300, 451, 3), generator=rng, dtype=torch.uint8).numpy()
    image = Image.fromarray(pixels)
    for weights in (ResNet18_Weights.IMAGENET1K_V1, ViT_B_16_Weights.IMAGENET1K_V1):
        ours = weights_preprocessing(weights)(image)
        theirs = weights.transforms()(image)
        assert ours.shape == theirs.shape
        assert torch.allclose(ours, theirs, atol=1e-6)
    wide = weights_preprocessing(ResNet18_Weights.IMAGENET1K_V1, input_size=(128, 256))
    assert wide(image).shape == (3, 128, 256)
    grey = weights_preprocessing(None, input_size=(32, 32), in_chans=1)
    assert grey(image).shape == (1, 32, 32)


def test_extreme_aspect_ratios_are_cheap_and_match_torchvision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np
    from PIL import Image
    from torchvision.transforms import functional

    from actviz.models.sources.torchvision import weights_preprocessing

    preset = ResNet18_Weights.IMAGENET1K_V1
    ours, theirs = weights_preprocessing(preset), preset.transforms()
    rng = np.random.default_rng(0)
    one_level = 1 / 255 / min(preset.transforms().std) + 1e-6
    shapes = [(3000, 40), (40, 3000), (1500, 7)]
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for w, h in shapes]
    expected = [theirs(image) for image in images]

    def whole_image_resize(*args: object, **kwargs: object) -> None:
        raise AssertionError("the whole image was resized before cropping")

    # 10000 x 1 would first become a 2,560,000 x 256 picture: only the kept region is resampled.
    monkeypatch.setattr(functional, "resize", whole_image_resize)
    strip = ours(Image.new("RGB", (10000, 1), (200, 10, 10)))
    assert strip.shape == (3, 224, 224)
    assert torch.allclose(strip[0], torch.full((224, 224), strip[0, 0, 0].item()))
    for image, want in zip(images, expected, strict=True):
        assert torch.allclose(ours(image), want, atol=one_level)


@pytest.mark.parametrize(
    "name", ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]
)
@pytest.mark.parametrize("weights", ["none", "auto"])
def test_segmentation_models_build_offline(name: str, weights: str) -> None:
    # torchvision's builders fetch an ImageNet backbone unless told not to; offline that
    # fails, and random weights must not need any download.
    loaded = load_model(name, weights=weights, device="cpu")
    assert loaded.weights.random
    if weights == "auto":
        assert "could not be downloaded" in (loaded.weights.reason or "")
    assert loaded.input_size == (520, 520)
    with torch.inference_mode():
        out = loaded.module(torch.zeros(1, 3, 64, 64))
    assert out["out"].shape == (1, 21, 64, 64)


@pytest.mark.parametrize("spec", ["default", "auto", "COCO_WITH_VOC_LABELS_V1"])
def test_segmentation_pretrained_weights_come_from_the_cache(spec: str) -> None:
    from torchvision.models import get_model
    from torchvision.models.segmentation import DeepLabV3_MobileNet_V3_Large_Weights

    # torchvision's files hold the auxiliary head its builder adds when given weights.
    torch.manual_seed(11)
    staged = get_model(
        "deeplabv3_mobilenet_v3_large", weights=None, weights_backbone=None, aux_loss=True
    ).state_dict()
    preset = DeepLabV3_MobileNet_V3_Large_Weights.COCO_WITH_VOC_LABELS_V1
    path = cached_weights_path(preset)
    path.parent.mkdir(parents=True)
    torch.save(staged, path)
    loaded = load_model("deeplabv3_mobilenet_v3_large", weights=spec, device="cpu")
    assert loaded.weights.source == "pretrained"
    assert loaded.weights.name == "DeepLabV3_MobileNet_V3_Large_Weights.COCO_WITH_VOC_LABELS_V1"
    state = loaded.module.state_dict()
    assert state.keys() == staged.keys()
    assert all(torch.equal(state[k], staged[k]) for k in staged)
    assert loaded.categories is not None and loaded.categories[0] == "__background__"


def test_a_builder_that_still_downloads_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.models import _api

    from actviz.errors import ModelError
    from actviz.models.registry import build_architecture

    seen: dict[str, object] = {}

    def downloading(*, weights: object = None, weights_backbone: object = "x") -> torch.nn.Module:
        seen["weights_backbone"] = weights_backbone
        torch.hub.load_state_dict_from_url("https://download.invalid/extra-0123456789.pth")
        return torch.nn.Identity()

    monkeypatch.setitem(_api.BUILTIN_MODELS, "downloading_net", downloading)
    with pytest.raises(ModelError) as info:
        build_architecture("downloading_net")
    message = str(info.value)
    assert seen["weights_backbone"] is None  # asked not to download, by its own signature
    assert message.startswith("cannot build downloading_net:")
    assert "network is unreachable" in message and "torch.hub cache" in message
    assert "\n" not in message


def test_architecture_follows_the_weights() -> None:
    from torchvision.models import ViT_B_16_Weights, ViT_H_14_Weights

    from actviz.models.registry import architecture_kwargs

    assert architecture_kwargs("resnet18", None, ResNet18_Weights.DEFAULT) == {}
    # vit_h_14's default weights are for 518 x 518 input, as its preprocessing crops.
    assert architecture_kwargs("vit_h_14", None, ViT_H_14_Weights.DEFAULT) == {"image_size": 518}
    assert architecture_kwargs("vit_b_16", None, ViT_B_16_Weights.DEFAULT) == {}
    state = {
        "encoder.pos_embedding": torch.zeros(1, 24 * 24 + 1, 8),
        "conv_proj.weight": torch.zeros(8, 3, 16, 16),
    }
    assert architecture_kwargs("vit_b_16", state, ViT_B_16_Weights.DEFAULT) == {"image_size": 384}
    assert architecture_kwargs("fcn_resnet50", {"aux_classifier.0.weight": torch.zeros(1)}) == {
        "aux_loss": True
    }
    assert architecture_kwargs("fcn_resnet50", {"classifier.0.weight": torch.zeros(1)}) == {}


def test_garbage_is_corrupt_not_a_pickle_to_trust(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as info:
        load_model("resnet18", weights=str(path), device="cpu")
    message = str(info.value)
    assert message.startswith(f"corrupt or unsupported checkpoint {path}: ")
    assert "trust_checkpoint" not in message and "full pickle" not in message
    assert "torch.save(model.state_dict(), path)" in message and "\n" not in message


@pytest.mark.parametrize("how", ["zip", "legacy", "plain pickle"])
def test_a_pickled_module_names_its_globals(tmp_path: Path, how: str) -> None:
    torch.manual_seed(5)
    model = resnet18().eval()
    path = tmp_path / "whole.pt"
    if how == "plain pickle":
        with path.open("wb") as fh:
            pickle.dump(model, fh)
    else:
        torch.save(model, path, _use_new_zipfile_serialization=how == "zip")
    with pytest.raises(CheckpointError) as info:
        load_model("resnet18", weights=str(path), device="cpu")
    message = str(info.value)
    assert "full pickle" in message and "trust_checkpoint=True" in message
    # The model's own classes come first, read from memoized strings correctly.
    wanted = message.split("(it wants ")[1]
    assert wanted.startswith("torchvision.models.resnet.")
    assert "_rebuild_parameter._rebuild" not in message


# --------------------------------------------------------------------------------------------
# What a new user types: a checkpoint as MODEL, a weights name that does not exist, --all


def _cli(*args: str) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from actviz.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("model", ["model.pt", "runs/best.pth", "w.safetensors", "last.CKPT"])
def test_a_checkpoint_given_as_the_model_says_to_use_weights(tmp_path: Path, model: str) -> None:
    image = tmp_path / "cat.png"
    from tests.conftest import make_image

    make_image(image)
    out = tmp_path / "out"
    code, _, err = _cli("run", model, str(image), "-o", str(out))
    assert code == 2
    message = err.strip()
    assert message.startswith(f"error: {model} is a checkpoint file, not a model;")
    assert f"--weights {model}" in message and "net.py:build" in message
    assert "\n" not in message and not out.exists()
    code, _, err = _cli("list-layers", model)
    assert code == 2 and "is a checkpoint file, not a model" in err


def test_an_unknown_weights_name_is_a_usage_error(tmp_path: Path) -> None:
    from tests.conftest import make_image

    image = make_image(tmp_path / "cat.png")
    out = tmp_path / "out"
    code, _, err = _cli("run", "resnet18", str(image), "--weights", "IMAGENET1K_V9", "-o", str(out))
    assert code == 2
    assert err.strip() == (
        "error: unknown weights 'IMAGENET1K_V9' for resnet18; valid: IMAGENET1K_V1 (default), "
        "auto, default, none or a checkpoint path"
    )
    assert not out.exists()
    with pytest.raises(UsageError):  # and still a WeightsError for library callers
        load_model("resnet50", weights="IMAGENET9K", device="cpu")
    code, _, err = _cli("run", "resnet18", str(image), "--weights", "not-a-name", "-o", str(out))
    assert code == 2 and "neither a weights name of resnet18 nor an existing file" in err
    # Weights that exist but cannot be had are an error, not a usage error.
    code, _, err = _cli("run", "resnet18", str(image), "--weights", "default", "-o", str(out))
    assert code == 1 and "could not be downloaded" in err


def test_models_all_marks_what_run_takes() -> None:
    entries = {e.name: e for e in list_models(include_all=True)}
    assert (entries["resnet18"].family, entries["resnet18"].runnable) == ("classification", True)
    assert (entries["fcn_resnet50"].family, entries["fcn_resnet50"].runnable) == (
        "segmentation",
        True,
    )
    for name, key in [
        ("fasterrcnn_resnet50_fpn", "detection"),
        ("r3d_18", "video"),
        ("raft_small", "optical_flow"),
        ("quantized_resnet18", "quantized"),
    ]:
        family = family_named(key)
        assert (entries[name].family, entries[name].runnable) == (family.label, family.runnable)
        if not family.runnable:  # what list_models calls runnable is what load_model takes
            with pytest.raises(UsageError, match=f"{name}: actviz does not run"):
                load_model(name, weights="none", device="cpu")
    assert all(e.runnable for e in list_models())
    assert len(list_models(include_all=True)) == 121
    detectors = list_models(include_all=True, family="detection")
    assert len(detectors) == 12 and {e.family for e in detectors} == {"detection"}
    assert [e.name for e in list_models("quantized_resnet1", family="quantized")] == [
        "quantized_resnet18"
    ]
    with pytest.raises(UsageError, match="unknown model family 'boxes'"):
        list_models(family="boxes")
    code, out, _ = _cli("models", "--family", "detection", "ssd")
    assert code == 0 and out.split() == ["ssd300_vgg16", "ssdlite320_mobilenet_v3_large"]

    code, out, _ = _cli("models", "--all", "r*")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "FAMILY", "RUN"]
    table = {row[0]: row[1:] for row in rows[1:]}
    assert table["resnet18"] == ["classification", "yes"]
    assert table["raft_small"] == ["optical-flow", "yes" if OPTICAL_FLOW.runnable else "no"]
    assert table["retinanet_resnet50_fpn"] == ["detection", "yes"]
    # Columns line up under their headers, also when every family name is short.
    code, out, _ = _cli("models", "--all", "--family", "video")
    lines = out.splitlines()
    assert code == 0 and {line.index("yes") for line in lines[1:]} == {lines[0].index("RUN")}
    code, out, _ = _cli("models", "--all", "--json", "fcn_resnet5")
    assert json.loads(out) == [
        {"name": "fcn_resnet50", "family": "segmentation", "runnable": True},
    ]
    code, out, _ = _cli("models", "--json", "raft")
    flow = [
        {"name": n, "family": "optical-flow", "runnable": True}
        for n in ("raft_large", "raft_small")
    ]
    assert code == 0 and json.loads(out) == (flow if OPTICAL_FLOW.runnable else [])


# --------------------------------------------------------------------------------------------
# Segmentation models: their preset's resize, class names, the logits module


def test_segmentation_preprocessing_resizes_without_a_crop_like_torchvision() -> None:
    import numpy as np
    from PIL import Image
    from torchvision.models.segmentation import FCN_ResNet50_Weights

    from actviz.models.sources.torchvision import weights_preprocessing

    preset = FCN_ResNet50_Weights.COCO_WITH_VOC_LABELS_V1
    ours, theirs = weights_preprocessing(preset), preset.transforms()
    assert not ours.crop and ours.resize_size == 520
    rng = np.random.default_rng(0)
    for h, w in [(300, 451), (451, 300), (520, 520)]:
        image = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        got, want = ours(image), theirs(image)
        assert got.shape == want.shape and 520 in got.shape[1:]
        assert torch.equal(got, want)
    # Only the centre of a strip is kept (4:1), not a 520000 x 520 resize of all of it.
    strip = ours(Image.new("RGB", (10000, 10), (9, 9, 9)))
    assert strip.shape == (3, 520, 2080)
    assert ours.fit_note((10000, 10), "strip.png") == (
        "image strip.png is 10000x10: upsampled 52x; its maps show interpolation more than "
        "image detail; the model saw its central 40x10, resized to 2080x520, i.e. 0.4% of "
        "the image"
    )
    # A fixed --input-size crops to it, as for classifiers.
    fixed = weights_preprocessing(preset, input_size=(256, 256))
    assert fixed.crop and fixed(image).shape == (3, 256, 256)


@pytest.mark.parametrize(
    ("size", "note"),
    [
        ((640, 480), None),
        ((1920, 1080), None),  # a 16:9 photo: 43% seen, nothing to say
        ((224, 224), None),
        (
            (10000, 10),
            "image x.png is 10000x10: upsampled 26x; its maps show interpolation more than "
            "image detail; the model saw a 224x224 centre crop of a 256000x256 resize, i.e. "
            "0.077% of the image",
        ),
        (
            (900, 300),
            "image x.png is 900x300: the model saw a 224x224 centre crop of a 768x256 resize, "
            "i.e. 26% of the image",
        ),
        ((1, 1), "image x.png is 1x1: upsampled 256x; the maps show no structure"),
        (
            (32, 32),
            "image x.png is 32x32: upsampled 8x; its maps show interpolation more than image "
            "detail",
        ),
    ],
)
def test_what_the_model_saw_of_an_image(size: tuple[int, int], note: str | None) -> None:
    from actviz.models.sources.torchvision import weights_preprocessing

    preprocess = weights_preprocessing(ResNet18_Weights.IMAGENET1K_V1)
    assert preprocess.fit_note(size, "x.png") == note


def test_segmentation_heads_are_named_by_class() -> None:
    fcn = load_model("fcn_resnet50", weights="none", device="cpu")
    assert fcn.segmentation == "classifier.4"
    assert set(fcn.channel_names) == {"classifier", "classifier.4"}
    names = fcn.channel_names["classifier.4"]
    assert len(names) == 21 and names[0] == "__background__" and names[8] == "cat"
    assert names == fcn.categories  # known without downloading, random weights or not

    lraspp = load_model("lraspp_mobilenet_v3_large", weights="none", device="cpu")
    assert lraspp.segmentation == "classifier"  # its head adds two convolutions' outputs
    assert set(lraspp.channel_names) == {
        "classifier",
        "classifier.low_classifier",
        "classifier.high_classifier",
    }
    from actviz.layouts import default_selector

    assert default_selector(lraspp.module) == "conv,classifier"
    assert default_selector(fcn.module) == "conv,classifier.4"

    resnet = load_model("resnet18", weights="none", device="cpu")
    assert resnet.segmentation is None and resnet.channel_names == {}


def test_a_segmentation_checkpoint_with_other_classes_has_no_names(tmp_path: Path) -> None:
    from torchvision.models import get_model

    torch.manual_seed(0)
    model = get_model("fcn_resnet50", weights=None, weights_backbone=None, num_classes=21)
    state = model.state_dict()
    path = tmp_path / "fcn.pt"
    torch.save(state, path)
    loaded = load_model("fcn_resnet50", weights=str(path), device="cpu")
    assert loaded.channel_names["classifier.4"][15] == "person"

    from actviz.models.segmentation import class_channel_names

    assert class_channel_names(loaded.module, ["a", "b"]) == {}  # 21 channels, 2 names
