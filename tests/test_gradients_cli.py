"""--grads, --target and --cam through the CLI, on resnet18 with random weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image

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
    layers = json.loads((out / "manifest.json").read_text())["images"][0]["layers"]
    assert all(x["gradient"]["target"] == 7 and x["gradient"]["norm"] > 0 for x in layers)
    stats = json.loads((out / "stats.json").read_text())
    assert set(stats["gradients"]["x"]) == {"layer1.0.conv1", "layer4"}
    with Image.open(out / "x" / "01_layer4_grad.png") as grad:
        pixels = np.asarray(grad.convert("RGB"))
    assert pixels.std() > 10  # a picture of a signed map, not a blank canvas
    with Image.open(out / "x" / "01_layer4_cam.png") as cam:
        assert cam.size == (224, 224)  # blended over what the model saw


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
