"""--grads, --target and --cam through the CLI, on resnet18 with random weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.render.legend import Header
from actviz.render.overlay import LABEL_HEIGHT, PANEL_GAP
from tests.conftest import make_image, run_images

pytestmark = pytest.mark.slow

LAYERS = "layer1.0.conv1,layer4"


def _run(tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    image = make_image(tmp_path / "in" / "x.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "resnet18", str(image), "-w", "none", "-o", str(out), "-q", *extra]
    )
    return result.exit_code, result.output, out


def test_grads_and_cam_files_and_records(tmp_path: Path) -> None:
    code, output, out = _run(tmp_path, "-l", LAYERS, "--grads", "--cam", "--target", "7")
    assert code == 0, output
    names = sorted(p.name for p in (out / "x").glob("*.png"))
    assert names == [
        "00_layer1.0.conv1.png",
        "00_layer1.0.conv1_cam.png",
        "00_layer1.0.conv1_grad.png",
        "01_layer4.png",
        "01_layer4_cam.png",
        "01_layer4_grad.png",
        "gradient_flow.png",
        "input.png",
    ]
    # The report shows every picture: the gradients, the maps and both gradient-flow charts.
    import re

    linked = {
        (page.parent / target).resolve()
        for page in out.rglob("*.html")
        for target in re.findall(r'src="([^"#]+)"', page.read_text(encoding="utf-8"))
    }
    drawn = [*(out / "x").glob("*.png"), out / "gradient_flow.png"]
    assert [p.name for p in drawn if p.resolve() not in linked] == []
    layers = run_images(out)[0]["layers"]
    assert all(x["gradient"]["target"] == 7 and x["gradient"]["norm"] > 0 for x in layers)
    stats = json.loads((out / "stats.json").read_text())
    # The run's summary per layer: over one image, that image's gradient norms.
    flow = stats["gradients"]
    assert flow["images"] == 1
    assert [x["name"] for x in flow["layers"]] == ["layer1.0.conv1", "layer4"]
    norms = {x["name"]: x["gradient"]["norm"] for x in layers}
    for x in flow["layers"]:
        assert x["norm_geomean"] == pytest.approx(norms[x["name"]], rel=1e-4)
        assert x["zero_or_nonfinite"] == 0
    with Image.open(out / "x" / "01_layer4_grad.png") as grad:
        pixels = np.asarray(grad.convert("RGB"))
    assert pixels.std() > 10  # a picture of a signed map, not a blank canvas
    # The input as the model saw it, and the map blended over it, under a header.
    with (
        Image.open(out / "x" / "01_layer4_cam.png") as cam,
        Image.open(out / "x" / "input.png") as seen,
    ):
        pixels, view = np.asarray(cam.convert("RGB")), np.asarray(seen.convert("RGB"))
    assert pixels.shape[1] == 2 * 224 + PANEL_GAP and pixels.shape[0] > LABEL_HEIGHT + 224
    panels = pixels[-224:]
    np.testing.assert_array_equal(panels[:, :224], view)
    assert np.abs(panels[:, -224:].astype(int) - view).mean() > 10  # heat colours over it


def test_cam_alone_defaults_to_the_last_spatial_layer(tmp_path: Path) -> None:
    code, output, out = _run(tmp_path, "--cam", "--cam-classes", "3")
    assert code == 0, output
    cams = sorted(p.name for p in (out / "x").glob("*_cam.png"))
    assert cams == ["19_layer4.1.conv2_cam.png"]  # the default selection is resnet18's convs
    assert not list((out / "x").glob("*_grad.png"))
    with Image.open(out / "x" / cams[0]) as panel:
        assert panel.size[0] > 3 * 224  # the input and three class maps side by side


@pytest.mark.parametrize(("target", "message"), [("tabbby cat", "tabby"), ("5000", "out of range")])
def test_bad_targets_are_usage_errors(tmp_path: Path, target: str, message: str) -> None:
    code, output, _ = _run(tmp_path, "-l", "layer4", "--grads", "--target", target)
    assert code == 2, output
    assert message in output and "Traceback" not in output


@pytest.fixture
def headers(monkeypatch: pytest.MonkeyPatch) -> list[Header]:
    """Every header the run draws, as the drawing code was given it."""
    from actviz.render import grid, legend, overlay

    seen: list[Header] = []
    original = legend.new_canvas

    def recording(body_height: int, body_width: int, header: Header, **kw: int) -> object:
        seen.append(header)
        return original(body_height, body_width, header, **kw)

    monkeypatch.setattr(legend, "new_canvas", recording)
    monkeypatch.setattr(grid, "new_canvas", recording)
    monkeypatch.setattr(overlay, "new_canvas", recording)
    return seen


def _text(header: Header) -> str:
    return " / ".join([header.title, header.info, *header.notes])


def test_every_picture_says_random_weights_and_names_the_class(
    tmp_path: Path, headers: list[Header]
) -> None:
    code, output, out = _run(
        tmp_path, "-l", "layer4", "--grads", "--cam", "--overlay", "--target", "7"
    )
    assert code == 0, output
    pictures = {p.name for p in (out / "x").glob("00_*.png")}
    assert pictures == {
        "00_layer4.png",
        "00_layer4_grad.png",
        "00_layer4_cam.png",
        "00_layer4_overlay.png",
    }
    assert len(headers) == 4  # grid, gradient grid, Grad-CAM, overlay
    assert all(any(n.startswith("random weights") for n in h.notes) for h in headers)
    grad, cam, overlay = (
        next(h for h in headers if word in _text(h))
        for word in ("gradient of", "Grad-CAM", "over the input")
    )
    grid = next(h for h in headers if h.title == "layer4   Sequential   (1, 512, 7, 7)")
    assert grid.info.startswith("64 of 512 channels") and len(grid.notes) == 1
    assert grad.title.endswith("gradient of the logit of class 7 (cock)")
    assert cam.title.startswith("layer4") and "class 7 (cock)  |  probability " in cam.info
    assert cam.labels == ("0", "max")
    assert overlay.info.startswith("mean of 512 channels over the input")
    layer = run_images(out)[0]["layers"][0]
    assert layer["gradient"]["target_label"] == "cock" and layer["gradient"]["zero"] is False
    assert layer["cam_note"] is None


TINY_VIT = """
import torch
from torchvision.models import VisionTransformer


def build(trained=False):
    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )
    if trained:
        torch.nn.init.normal_(model.heads.head.weight, std=0.5)
    return model
"""
BLOCK0, BLOCK1 = "encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"


def _vit_run(tmp_path: Path, spec: str, *extra: str) -> tuple[str, str, Path]:
    factory = tmp_path / "tinyvit.py"
    factory.write_text(TINY_VIT)
    image = make_image(tmp_path / "in" / "x.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            f"{factory}:{spec}",
            str(image),
            "--input-size",
            "32,32",
            "-o",
            str(out),
            "-q",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    return result.stderr, result.stdout, out


def test_vit_cam_defaults_to_a_layer_its_patches_reach_and_says_why_it_is_blank(
    tmp_path: Path, headers: list[Header]
) -> None:
    stderr, _, out = _vit_run(tmp_path, "build", "--cam")
    # The last block's patch tokens never reach the class-token readout: the block before.
    assert sorted(p.name for p in (out / "x").glob("*_cam.png")) == [f"01_{BLOCK0}_cam.png"]
    record = json.loads((out / "manifest.json").read_text())
    layer = next(x for x in run_images(out)[0]["layers"] if x["name"] == BLOCK0)
    why = "the classifier heads.head has all-zero weights"
    assert layer["gradient"]["zero"] is True and layer["gradient"]["note"].startswith(why)
    assert layer["cam_note"].startswith(why)
    assert len(record["notes"]) == 1 and why in record["notes"][0]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and BLOCK0 in warnings[0] and why in warnings[0]
    cam = next(h for h in headers if "Grad-CAM" in h.title)
    assert any(n.startswith("the Grad-CAM map is all zero: " + why) for n in cam.notes)
    assert not any("random weights" in _text(h) for h in headers)  # the factory's weights


def test_vit_last_block_cam_is_blank_for_the_class_token_readout(
    tmp_path: Path, headers: list[Header]
) -> None:
    from actviz.gradients.core import CLASS_TOKEN_NOTE

    stderr, _, out = _vit_run(
        tmp_path, "build(trained=True)", "-l", f"{BLOCK0},{BLOCK1}", "--cam", "--grads"
    )
    layers = {x["name"]: x for x in run_images(out)[0]["layers"]}
    assert layers[BLOCK0]["cam_note"] is None and layers[BLOCK0]["gradient"]["zero"] is False
    assert layers[BLOCK1]["cam_note"] == CLASS_TOKEN_NOTE
    assert layers[BLOCK1]["gradient"] == {
        **layers[BLOCK1]["gradient"],
        "zero": True,
        "note": CLASS_TOKEN_NOTE,
    }
    assert stderr.count("only the class token reaches the classifier") == 1
    with Image.open(out / "x" / f"00_{BLOCK0}_cam.png") as good:
        heat = np.asarray(good.convert("RGB"))[-160:]  # the 32 px input, shown at 160 px
    assert np.abs(heat[:, -160:].astype(int) - heat[:, :160]).mean() > 10
    grad = next(h for h in headers if "gradient of" in h.title and BLOCK1 in h.title)
    assert f"the gradient is all zero: {CLASS_TOKEN_NOTE}" in grad.notes
