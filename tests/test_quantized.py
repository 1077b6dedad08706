"""Quantized models: built and quantized on the CPU, recorded dequantized, named as the fused
model has them, refused on another device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import UsageError
from actviz.hooks import ActivationRecorder
from actviz.models import list_layers
from actviz.models.families import QUANTIZED
from actviz.models.registry import load_model
from tests.conftest import make_image

runner = CliRunner()

_FACTORY = """
import torch
from torch import nn
from torch.ao import quantization as tq


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 6, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 4)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.conv2(self.relu(self.bn1(self.conv1(self.quant(x)))))
        return self.dequant(self.fc(self.pool(x).flatten(1)))


def build(seed=0):
    engines = torch.backends.quantized.supported_engines
    engine = "fbgemm" if "fbgemm" in engines else "qnnpack"
    torch.backends.quantized.engine = engine
    torch.manual_seed(seed)
    model = Net().eval()
    tq.fuse_modules(model, [["conv1", "bn1", "relu"]], inplace=True)
    model.qconfig = tq.get_default_qconfig(engine)
    tq.prepare(model, inplace=True)
    model(torch.rand(4, 3, 32, 32))
    tq.convert(model, inplace=True)
    return model
"""


@pytest.fixture
def factory(tmp_path: Path) -> str:
    (tmp_path / "qnet.py").write_text(_FACTORY)
    return str(tmp_path / "qnet.py") + ":build"


def test_a_quantized_layer_is_recorded_as_a_plain_hook_dequantizes_it(
    factory: str, tmp_path: Path
) -> None:
    loaded = load_model(factory, device="cpu", input_size=(32, 32))
    assert loaded.family is QUANTIZED and loaded.device.type == "cpu"
    from PIL import Image

    x = loaded.preprocess(Image.open(make_image(tmp_path / "a.png", (40, 36)))).unsqueeze(0)
    plain: dict[str, torch.Tensor] = {}
    handle = loaded.module.conv1.register_forward_hook(
        lambda _m, _i, out: plain.__setitem__("conv1", out.dequantize())
    )
    with torch.inference_mode():
        loaded.module(x)
    handle.remove()
    with ActivationRecorder(loaded.module, ["conv1", "conv2"]) as acts, torch.inference_mode():
        loaded.module(x)
    assert acts["conv1"].dtype == torch.float32
    assert torch.equal(acts["conv1"], plain["conv1"])
    assert acts["conv2"].shape == (1, 6, 32, 32)

    # The same through the command, its grids and the saved tensors.
    out = tmp_path / "out"
    argv = ["run", factory, str(tmp_path / "a.png"), "--input-size", "32,32", "--save-tensors"]
    result = runner.invoke(app, [*argv, "-l", "conv1,conv2", "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    saved = np.load(out / "a" / "00_conv1.npy")
    np.testing.assert_array_equal(saved, plain["conv1"][0].numpy())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model_info"]["family"] == "quantized"
    # No gradients through quantized kernels: a one-line usage error.
    cam = runner.invoke(app, [*argv, "--cam", "-o", str(tmp_path / "cam")])
    assert cam.exit_code == 2 and "quantized kernels have no gradients" in cam.stderr


def _factory_module(factory: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("qnet_test", factory.split(":")[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain_dequantized(model: torch.nn.Module, names: list[str], x: torch.Tensor) -> dict:
    """What plain forward hooks see, dequantized: the reference actviz's layers must equal."""
    seen: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    handles = [
        modules[n].register_forward_hook(
            lambda _m, _i, out, n=n: seen.__setitem__(n, out.dequantize())
        )
        for n in names
    ]
    with torch.inference_mode():
        model(x)
    for handle in handles:
        handle.remove()
    return seen


@pytest.mark.parametrize("versions", ["kept", "lost"])
def test_a_quantized_checkpoint_loads_its_packed_linear(
    factory: str, tmp_path: Path, versions: str
) -> None:
    """A quantized Linear saves a dtype and a (weight, bias) tuple beside its tensors; the safe
    reader keeps them, and a state_dict rebuilt as a plain dict (its modules' versions lost)
    is read in the model's own format."""
    trained = _factory_module(factory).build(seed=1)  # other weights than the factory's own
    state = trained.state_dict()
    assert isinstance(state["fc._packed_params.dtype"], torch.dtype)
    checkpoint = tmp_path / "q.pt"
    torch.save(state if versions == "kept" else {"model": dict(state), "epoch": 3}, checkpoint)
    loaded = load_model(factory, weights=str(checkpoint), device="cpu", input_size=(32, 32))
    assert loaded.weights.source == "checkpoint"
    from PIL import Image

    x = loaded.preprocess(Image.open(make_image(tmp_path / "a.png", (40, 36)))).unsqueeze(0)
    names = ["conv1", "conv2", "fc"]
    expected = _plain_dequantized(trained, names, x)
    with ActivationRecorder(loaded.module, names) as acts, torch.inference_mode():
        out = loaded.module(x)
    for name in names:
        assert torch.equal(acts[name], expected[name]), name
    with torch.inference_mode():
        assert torch.equal(out, trained(x))


@pytest.mark.slow
def test_a_users_torchvision_quantized_checkpoint_runs(tmp_path: Path) -> None:
    """``torch.save(get_model("quantized_resnet18", quantize=True).state_dict(), p)`` then
    ``actviz run quantized_resnet18 IMG --weights p``: each layer is what a plain hook on the
    saved model sees, dequantized."""
    from torchvision.models import get_model

    from actviz.models.families.quantized import quantized_engine

    torch.manual_seed(7)  # not actviz's seed: the checkpoint's weights must be the ones used
    saved = get_model("quantized_resnet18", quantize=True, backend=quantized_engine()).eval()
    checkpoint = tmp_path / "q.pt"
    torch.save(saved.state_dict(), checkpoint)
    image = make_image(tmp_path / "cat.png", (80, 64))
    out = tmp_path / "out"
    argv = ["run", "quantized_resnet18", str(image), "--weights", str(checkpoint)]
    result = runner.invoke(
        app, [*argv, "-l", "conv1,layer3.1,fc", "--save-tensors", "-o", str(out), "--no-report"]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["weights"]["source"] == "checkpoint"
    from PIL import Image

    loaded = load_model("quantized_resnet18", weights=str(checkpoint), device="cpu")
    x = loaded.preprocess(Image.open(image).convert("RGB")).unsqueeze(0)
    expected = _plain_dequantized(saved, ["conv1", "layer3.1", "fc"], x)
    for index, name in enumerate(["conv1", "layer3.1"]):
        tensor = np.load(out / "cat" / f"{index:02d}_{name}.npy")
        np.testing.assert_array_equal(tensor, expected[name][0].numpy())
    assert expected["fc"].shape == (1, 1000)


def test_list_layers_says_the_layers_are_fused(factory: str) -> None:
    listing = list_layers(factory, input_size=(32, 32))
    rows = {row.name: row for row in listing.layers}
    assert listing.family == "quantized" and "fused" in (listing.note or "")
    assert rows["conv1"].module_type == "ConvReLU2d" and rows["conv1"].shape == (1, 8, 32, 32)
    assert rows["bn1"].module_type == "Identity"
    result = runner.invoke(app, ["list-layers", factory, "--input-size", "32,32"])
    assert result.exit_code == 0 and "conv+bn+relu are fused" in result.stdout


def test_a_torchvision_quantized_model_runs_on_the_cpu_only(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="quantized kernels run on the CPU only"):
        load_model("quantized_mobilenet_v2", weights="none", device="cuda")
    image = str(make_image(tmp_path / "x.png"))
    out = str(tmp_path / "out")
    result = runner.invoke(
        app, ["run", "quantized_resnet18", image, "--device", "cuda:0", "-o", out]
    )
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "--device cpu" in result.stderr


def test_a_torchvision_quantized_model_lists_fused_layers() -> None:
    listing = list_layers("quantized_resnet18")
    rows = {row.name: row for row in listing.layers}
    assert listing.family == "quantized"
    assert rows["conv1"].module_type == "ConvReLU2d" and rows["conv1"].shape == (1, 64, 112, 112)
    assert rows["layer4.1.conv2"].shape == (1, 512, 7, 7)
    assert rows["fc"].shape == (1, 1000)


def test_building_a_quantized_model_says_nothing_of_pytorchs_own_steps() -> None:
    """Its observers never saw data when it is built without weights: PyTorch warns about its
    own build step, which no user of actviz can act on."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_model("quantized_mobilenet_v3_large", weights="none", device="cpu")
    assert not [w for w in seen if "observer" in str(w.message)], [str(w.message) for w in seen]


@pytest.mark.slow
def test_top_images_and_sae_rank_a_quantized_layer_as_run_draws_it(
    factory: str, tmp_path: Path
) -> None:
    """The layers' quint8 outputs are ranked dequantized (they were refused as "indices or a
    mask"), and sae trains on them and splices its reconstruction back in, quantized."""
    import actviz

    images = [make_image(tmp_path / "in" / f"{i}.png", (40, 36), seed=i) for i in range(4)]
    found = actviz.top_images(
        factory,
        [tmp_path / "in"],
        out=tmp_path / "top",
        layers="conv2",
        k=2,
        input_size=(32, 32),
        weights="none",
    )
    (layer,) = found.document["layers"]
    assert layer["name"] == "conv2" and layer["channels_total"] == 6
    assert found.document["skipped"] == []
    loaded = load_model(factory, device="cpu", input_size=(32, 32))
    from PIL import Image

    x = torch.stack([loaded.preprocess(Image.open(p)) for p in images])
    plain = _plain_dequantized(loaded.module, ["conv2"], x)["conv2"]
    best = plain.amax(dim=(2, 3)).amax(dim=0)  # each channel's maximum over the images
    scores = [channel["top"][0]["score"] for channel in layer["channels"]]
    np.testing.assert_allclose(scores, best.numpy(), rtol=1e-6)

    trained = actviz.sae(
        factory,
        [tmp_path / "in"],
        out=tmp_path / "sae",
        layers="conv2",
        features=12,
        k=2,
        input_size=(32, 32),
        epochs=1,
        min_steps=0,
        pages=False,
        weights="none",
    )
    assert trained.document["layer"]["key"] == "conv2"
    assert (tmp_path / "sae" / "sae.safetensors").is_file()
    quality = trained.document["metrics"]
    assert quality["top1_changed"] is not None  # the forward with the splice ran
