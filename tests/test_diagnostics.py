"""Statistics, anomaly flags, --fail-on and the report, end to end through the CLI."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image, run_images
from tests.oracles import read_table_rows
from tests.test_report_browser import browse, checked_copy, find_chromium

pytestmark = pytest.mark.slow

PLANTED = '''
import torch
from torch import nn


class Planted(nn.Module):
    """conv2 is mostly dead after its ReLU; `poison` turns everything into NaN/Inf."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = nn.ReLU()
        self.poison = nn.Identity()
        self.conv3 = nn.Conv2d(8, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)
        with torch.no_grad():
            self.conv2.bias[:6] = -100.0

    def forward(self, x):
        x = self.act2(self.conv2(self.act1(self.conv1(x))))
        x = self.poison(x / torch.zeros_like(x))
        return self.fc(self.pool(self.conv3(x)).flatten(1))


def build():
    return Planted()
'''


@pytest.fixture
def planted(tmp_path: Path) -> str:
    path = tmp_path / "planted model.py"
    path.write_text(PLANTED)
    return f"{path}:build"


def test_planted_nan_is_named_everywhere(planted: str, tmp_path: Path) -> None:
    image = make_image(tmp_path / "in" / "x.png")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["stats", planted, str(image), "-l", "all", "-o", str(out), "--report", "--fail-on", "nan"],
    )
    assert result.exit_code == 4, result.output
    assert "first layer with NaN/Inf: poison" in result.stderr
    assert "--fail-on" in result.stderr and "poison" in result.stderr
    assert not list(out.rglob("*_*.png"))  # statistics only: no grids

    doc = json.loads((out / "stats.json").read_text())
    assert doc["format"] == 2 and doc["images"]["count"] == doc["images"]["flagged"] == 1
    assert doc["flags"]["first_nonfinite"] == [{"layer": "poison", "images": 1, "first": "x"}]
    record = run_images(out)[0]
    assert record["first_nonfinite"] == "poison"
    kinds = {(f["layer"], f["kind"]) for f in record["flags"]}
    assert ("act2", "dead") in kinds and ("poison", "nan") in kinds
    table = {r["layer"]: r for r in read_table_rows(out / "stats.parquet") if r["image"] == "x"}
    assert table["act2"]["dead_channels"] == 6 and table["act2"]["channels"] == 8
    assert "dead" in table["act2"]["flags"] and "nan" in table["poison"]["flags"]

    rows = list(csv.DictReader(io.StringIO((out / "stats.csv").read_text())))
    by_layer = {r["layer"]: r for r in rows if r["image"] == "x"}
    assert "nan" in by_layer["poison"]["flags"] and by_layer["conv1"]["flags"] == ""
    assert int(by_layer["conv3"]["nan"]) == 4 * 224 * 224

    html = (out / "index.html").read_text()
    assert "poison" in html and re.search(r"nan", html, re.I)


@pytest.mark.parametrize(("kinds", "code"), [("dead", 4), ("exploding", 0), ("nonsense", 2)])
def test_fail_on_codes(planted: str, tmp_path: Path, kinds: str, code: int) -> None:
    image = make_image(tmp_path / "in" / "x.png")
    healthy = tmp_path / "healthy.py"
    healthy.write_text(
        PLANTED.replace("x = self.poison(x / torch.zeros_like(x))", "pass").replace(
            "self.conv2.bias[:6] = -100.0", "pass"
        )
    )
    model = planted if kinds != "exploding" else f"{healthy}:build"
    result = CliRunner().invoke(
        app,
        [
            "stats",
            model,
            str(image),
            "-l",
            "conv,act",
            "-o",
            str(tmp_path / "o"),
            "--fail-on",
            kinds,
            "-q",
        ],
    )
    assert result.exit_code == code, result.output
    if code == 2:
        assert "nonsense" in result.stderr and "nan" in result.stderr


def test_folder_run_report_opens_in_a_browser(tmp_path: Path) -> None:
    chromium = find_chromium()
    photos = tmp_path / "photos"
    for i in range(3):
        make_image(photos / ("a" if i else "b") / f"img {i}.png", seed=i)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "resnet18",
            str(photos),
            "-l",
            "layer1.0.conv1,layer4.1.conv2",
            "-w",
            "none",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    index = out / "index.html"
    assert index.is_file() and (out / "stats.json").is_file()
    pages = [
        index,
        *sorted((out / "report" / "images").glob("*.html")),
        *sorted((out / "report" / "layers").glob("*.html")),
    ]
    assert len(pages) == 1 + 3 + 2
    for page in pages:  # every local link and picture points at a file that exists
        for ref in re.findall(r'(?:src|href)="([^"#?:]+)', page.read_text()):
            from urllib.parse import unquote

            assert (page.parent / unquote(ref)).exists(), (page, ref)
    if chromium is None:
        pytest.skip("Chromium is not installed; install it with `apt-get install chromium`")
    for page in (index, pages[1], pages[-1]):
        copy = checked_copy(page)
        shown = browse(chromium, tmp_path / "profile", "--dump-dom", copy.as_uri())
        assert shown.returncode == 0, shown.stderr[-2000:]
        attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', shown.stdout))
        assert int(attrs.get("data-images", "0")) >= 2, (page, attrs)
        assert attrs.get("data-broken") == "0", (page, attrs.get("data-broken-src"))
