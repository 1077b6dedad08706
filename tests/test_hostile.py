"""A folder of every kind of surprise, and an awkward model, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image, run_images

pytestmark = pytest.mark.slow


def _hostile(root: Path) -> dict[str, str | None]:
    """Write the folder; return file name -> expected failure reason (None: must be drawn)."""
    root.mkdir(parents=True)
    rgb = np.asarray(Image.open(make_image(root / "plain.jpg", size=(80, 60))).convert("RGB"))
    Image.fromarray(rgb).convert("CMYK").save(root / "cmyk.jpg")
    ramp = (np.linspace(0, 65535, 64 * 64).reshape(64, 64)).astype(np.uint16)
    Image.fromarray(ramp).save(root / "deep16.png")
    Image.fromarray(np.linspace(0, 1, 32 * 48, dtype=np.float32).reshape(32, 48)).save(
        root / "float.tif"
    )
    frames = [Image.new("P", (40, 30), i * 40) for i in range(3)]
    frames[0].save(root / "anim.gif", save_all=True, append_images=frames[1:])
    rgba = Image.new("RGBA", (50, 50), (0, 0, 0, 0))
    rgba.paste((255, 0, 0, 255), (10, 10, 30, 30))
    rgba.save(root / "alpha.png")
    exif = Image.new("RGB", (60, 40), (10, 200, 10)).getexif()
    exif[0x0112] = 6
    Image.new("RGB", (60, 40), (10, 200, 10)).save(root / "rotated.jpg", exif=exif)
    Image.new("RGB", (1, 1), (5, 5, 5)).save(root / "dot.png")
    Image.new("RGB", (3000, 4), (90, 90, 90)).save(root / "wide.png")
    Image.new("RGB", (30, 30), (1, 2, 3)).save(root / "name with spaces ü [bold].png")
    good = (root / "plain.jpg").read_bytes()
    (root / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "empty.png").write_bytes(b"")
    (root / "letter.jpg").write_text("Dear user, this is not a photo.")
    Image.new("L", (1500, 1500)).save(root / "bomb.png")
    return {
        "plain.jpg": None, "cmyk.jpg": None, "deep16.png": None, "float.tif": None,
        "anim.gif": None, "alpha.png": None, "rotated.jpg": None, "dot.png": None,
        "wide.png": None, "name with spaces ü [bold].png": None,
        "truncated.jpg": "truncated", "empty.png": "empty", "letter.jpg": "not an image",
        "bomb.png": "too large",
    }  # fmt: skip


def test_every_surprise_is_drawn_or_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _hostile(tmp_path / "hostile")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # so 1500 x 1500 is a "bomb"
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "resnet18",
            str(tmp_path / "hostile"),
            "-l",
            "layer1.0.conv1",
            "-w",
            "none",
            "-o",
            str(out),
            "--no-report",
        ],
    )
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert "ü [bold].png" in result.stdout  # printed as itself, not eaten as markup
    images = {Path(i["path"]).name: i for i in run_images(out)}
    assert set(images) == set(expected)
    for name, reason in expected.items():
        entry = images[name]
        if reason is None:
            assert entry["status"] == "ok", (name, entry["error"])
            png = out / entry["layers"][0]["file"]
            with Image.open(png) as grid:
                assert np.asarray(grid.convert("RGB")).std() > 0, name
        else:
            assert entry["status"] == "failed" and reason in entry["error"], (name, entry)
            assert str(tmp_path / "hostile" / name) in result.stderr or name in result.stderr
    assert images["rotated.jpg"]["size"] == [40, 60]  # EXIF orientation applied
    assert images["alpha.png"]["layers"][0]["min"] is not None
    assert not [p for p in out.rglob("*") if "actviz-tmp" in p.name]


AWKWARD = """
import torch
from torch import nn


class Five(nn.Module):
    def forward(self, x):
        return x.unsqueeze(2).repeat(1, 1, 2, 1, 1)  # (B, C, 2, H, W): no way to draw it


class Awkward(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleDict({"stem-a": nn.Conv2d(3, 4, 3, padding=1)})
        self.five = Five()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = self.parts["stem-a"](x)
        self.five(y)
        return self.head(y.mean(dim=(2, 3)))


def build():
    return Awkward()
"""


def test_what_cannot_be_drawn_is_listed(tmp_path: Path) -> None:
    model = tmp_path / "awkward.py"
    model.write_text(AWKWARD)
    image = make_image(tmp_path / "in" / "x.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            f"{model}:build",
            str(image),
            "-l",
            "all",
            "-o",
            str(out),
            "--no-report",
            "--input-size",
            "32,32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "not drawn five" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [u["layer"] for u in manifest["undrawable"]] == ["five"]
    layers = {x["name"]: x for x in run_images(out)[0]["layers"]}
    assert layers["parts.stem-a"]["file"] and layers["head"]["file"]
    assert layers["five"]["file"] is None and layers["five"]["note"]
    assert layers["parts.stem-a"]["shape"] == [1, 4, 32, 32]


GREY = """
import torch
from torch import nn


class Grey(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 10)

    def forward(self, x):
        if x.shape[-1] != 28:
            raise ValueError(f"expects 28 x 28 digits, got {tuple(x.shape)}")
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


def build():
    return Grey()
"""


def test_greyscale_model_gets_views_overlays_and_cams(tmp_path: Path) -> None:
    model = tmp_path / "grey.py"
    model.write_text(GREY)
    image = make_image(tmp_path / "in" / "digit.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            f"{model}:build",
            str(image),
            "-l",
            "conv,pool",
            "-o",
            str(out),
            "--input-size",
            "28,28",
            "--in-chans",
            "1",
            "--overlay",
            "--cam",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    names = {p.name for p in (out / "digit").iterdir()}
    assert {"input.png", "00_conv_overlay.png", "00_conv_cam.png", "01_pool.png"} <= names
    with Image.open(out / "digit" / "input.png") as view:
        assert view.size == (28, 28)
    layers = run_images(out)[0]["layers"]
    assert layers[1]["layout"] == "vector"  # (6, 1, 1): a strip of values, not blank tiles


def test_model_errors_are_one_line_and_leave_no_folder(tmp_path: Path) -> None:
    model = tmp_path / "grey.py"
    model.write_text(GREY)
    image = make_image(tmp_path / "in" / "digit.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", f"{model}:build", str(image), "-o", str(out), "--in-chans", "1"],
    )
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "expects 28 x 28" in errors[0] and "--input-size" in errors[0]
    assert "Traceback" not in result.output
    assert not out.exists()
