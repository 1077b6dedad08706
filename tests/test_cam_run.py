"""`run --cam-method`: each method drawn and recorded like Grad-CAM, on a ViT's tokens and on a
convolutional net, with the picture's map equal to the method computed on its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.render.legend import Header
from actviz.render.overlay import PANEL_GAP
from tests.conftest import make_image, run_images

TINY_VIT = """
import torch
from torchvision.models import VisionTransformer


def build():
    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)
    return model
"""
BLOCK0 = "encoder.layers.encoder_layer_0"


@pytest.fixture
def headers(monkeypatch: pytest.MonkeyPatch) -> list[Header]:
    from actviz.render import legend, overlay

    seen: list[Header] = []
    original = legend.new_canvas

    def recording(body_height: int, body_width: int, header: Header, **kw: int) -> object:
        seen.append(header)
        return original(body_height, body_width, header, **kw)

    monkeypatch.setattr(legend, "new_canvas", recording)
    monkeypatch.setattr(overlay, "new_canvas", recording)
    return seen


def _heat(path: Path) -> np.ndarray:
    """The map's panel: the 32 px input shown at 160 px, right of the input's panel."""
    with Image.open(path) as picture:
        pixels = np.asarray(picture.convert("RGB"))
    return pixels[-160:, 160 + PANEL_GAP : 320 + PANEL_GAP].astype(int)


@pytest.mark.parametrize(
    ("method", "title"),
    [
        ("gradcam++", "Grad-CAM++"),
        ("layercam", "LayerCAM"),
        ("score-cam", "Score-CAM"),
        ("eigencam", "EigenCAM"),
    ],
)
def test_each_method_is_drawn_and_recorded_on_vit_tokens(
    tmp_path: Path, headers: list[Header], method: str, title: str
) -> None:
    factory = tmp_path / "tinyvit.py"
    factory.write_text(TINY_VIT)
    image = make_image(tmp_path / "in" / "x.png")
    pictures = {}
    for name, extra in (("grad", []), ("m", ["--cam-method", method])):
        out = tmp_path / name
        result = CliRunner().invoke(
            app,
            [
                "run",
                f"{factory}:build",
                str(image),
                "--input-size",
                "32,32",
                "-l",
                BLOCK0,
                "--cam",
                "-o",
                str(out),
                "-q",
                *extra,
            ],
        )
        assert result.exit_code == 0, result.output
        layer = run_images(out)[0]["layers"][0]
        pictures[name] = _heat(out / "x" / f"00_{BLOCK0}_cam.png")
        assert layer["pictures"]["cam"] if "pictures" in layer else layer["cam"]
    assert layer["cam_method"] == method.replace("-", "")
    cams = [h for h in headers if h.title.endswith(("Grad-CAM", title))]
    assert [h.title.split()[-1] for h in cams] == ["Grad-CAM", title]
    # The method's own map, not Grad-CAM's under another name.
    assert np.abs(pictures["m"] - pictures["grad"]).mean() > 2
    # EigenCAM's map is the same whatever the class: its header names no class as its own.
    info = cams[-1].info
    if method == "eigencam":
        assert info.startswith("class-agnostic") and "top class" in info
    else:
        assert "probability" in info and not info.startswith("class-agnostic")


def test_eigencam_refuses_more_than_one_class(tmp_path: Path) -> None:
    """One class-agnostic map would be drawn under three class names: refused, exit 2."""
    image = make_image(tmp_path / "x.png")
    argv = ["run", "resnet18", str(image), "-w", "none", "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*argv, "--cam-method", "eigencam", "--cam-classes", "3"])
    assert result.exit_code == 2
    assert "eigencam draws one class-agnostic map per image" in result.output
    assert "drop --cam-classes" in result.output and not (tmp_path / "o").exists()


def test_cam_method_equals_the_library_map_and_implies_cam(tmp_path: Path) -> None:
    """The map of `run --cam-method eigencam` (no --cam) is the EigenCAM of the layer output."""
    from actviz.gradients.methods import scale_cams
    from actviz.gradients.registry import raw_cam

    factory = tmp_path / "tinyvit.py"
    factory.write_text(TINY_VIT)
    image = make_image(tmp_path / "in" / "x.png")
    out = tmp_path / "out"
    args = ["run", f"{factory}:build", str(image), "--input-size", "32,32", "-l", BLOCK0]
    result = CliRunner().invoke(
        app, [*args, "--cam-method", "EigenCAM", "--save-tensors", "-o", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    layer = run_images(out)[0]["layers"][0]
    assert layer["cam_method"] == "eigencam"
    tokens = torch.from_numpy(np.load(out / layer["tensor"]))
    expected = scale_cams(raw_cam("eigencam", tokens[None], layout="tokens"))[0]
    assert expected.shape == (4, 4) and float(expected.max()) == 1.0
    # The 4x4 map is shown over the 32 px input at 160 px: 40 px per patch; read the centres.
    heat = _heat(out / "x" / f"00_{BLOCK0}_cam.png")
    centres = heat[20::40, 20::40]
    # jet over the input: red minus blue peaks where the map does.
    warmth = centres[..., 0] - centres[..., 2]
    assert np.argmax(warmth) == int(torch.argmax(expected))


def test_unknown_method_is_a_usage_error(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "resnet18",
            str(image),
            "-w",
            "none",
            "--cam-method",
            "smooth",
            "-o",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2
    assert "--cam-method takes one of gradcam, gradcam++, layercam, scorecam, eigencam" in (
        result.output
    )
    assert not (tmp_path / "o").exists()


def _hf_vit(folder: Path) -> str:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    torch.manual_seed(1)
    transformers.ViTForImageClassification(config).eval().save_pretrained(folder)
    return f"hf:{folder}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "layer", "grid"),
    [
        ("timm/test_vit", "blocks.0", (10, 10)),
        ("timm/test_convnext", "stages.1", (20, 20)),
        ("hf", "vit.layers.0", (4, 4)),
    ],
)
def test_timm_and_hugging_face_models_with_each_layout(
    tmp_path: Path, headers: list[Header], source: str, layer: str, grid: tuple[int, int]
) -> None:
    """LayerCAM and EigenCAM on timm's ViT (tokens), timm's ConvNeXt and a Hugging Face ViT,
    with random weights said in every CAM header."""
    pytest.importorskip("timm")
    model = _hf_vit(tmp_path / "hf") if source == "hf" else source
    image = make_image(tmp_path / "in" / "x.png", size=(40, 30))
    for method in ("layercam", "eigencam"):
        out = tmp_path / method
        args = ["run", model, str(image), "-w", "none", "-l", layer, "-o", str(out), "-q"]
        result = CliRunner().invoke(app, [*args, "--cam-method", method, "--no-report"])
        assert result.exit_code == 0, result.output
        record = run_images(out)[0]["layers"][0]
        assert record["name"] == layer and record["cam_method"] == method
        assert (out / "x" / f"00_{layer}_cam.png").is_file()
    cams = [h for h in headers if h.title.endswith(("LayerCAM", "EigenCAM"))]
    assert len(cams) == 2
    assert all(any("random weights" in n.lower() for n in h.notes) for h in cams)
    # The maps themselves, on the layer's own grid, from the library on the same output.
    from actviz.gradients.core import compute_gradients
    from actviz.gradients.methods import scale_cams
    from actviz.gradients.registry import raw_cam
    from actviz.layouts import layer_contexts
    from actviz.models import load_model

    loaded = load_model(model, weights="none", device="cpu")
    ctx = layer_contexts(loaded.module, loaded.input_size)[layer]
    x = torch.rand(1, 3, *loaded.input_size, generator=torch.Generator().manual_seed(0))
    capture = compute_gradients(loaded.module, x, [layer]).captures[layer]
    layout = "tokens" if ctx.token_grid else ("nhwc" if ctx.channels_last else "nchw")
    shape = {"layout": layout, "grid": ctx.token_grid, "prefix_tokens": ctx.prefix_tokens or 1}
    for method in ("layercam", "eigencam"):
        maps = scale_cams(raw_cam(method, capture.activation, capture.gradient, **shape))
        assert tuple(maps.shape[-2:]) == grid and not maps.isnan().any()
        # EigenCAM's strongest response is positive by its sign rule; LayerCAM's map may be
        # all zero (no positive evidence for the class, as the header says when it is).
        peak = float(maps.max())
        assert peak == pytest.approx(1.0) if method == "eigencam" else peak in (0.0, 1.0)
