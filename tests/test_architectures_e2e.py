"""The architectures people ask about, end to end with their default selectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("model", "expect_layout", "tile"),
    [
        ("vit_b_16", "tokens", (14, 14)),
        ("swin_t", "nhwc", None),
        ("convnext_tiny", "nchw", None),
        ("mobilenet_v3_small", "nchw", None),
        ("efficientnet_b0", "nchw", None),
        ("inception_v3", "nchw", None),
    ],
)
def test_default_selection_draws_every_layer(
    tmp_path: Path, model: str, expect_layout: str, tile: tuple[int, int] | None
) -> None:
    image = make_image(tmp_path / "in" / "x.png", size=(90, 70))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", model, str(image), "-w", "none", "-o", str(out), "-c", "4", "--no-report", "-q"],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    layers = manifest["images"][0]["layers"]
    assert 5 <= len(layers) <= 120, len(layers)
    assert all(x["file"] for x in layers), [x["name"] for x in layers if not x["file"]]
    assert not manifest["undrawable"] and not manifest["warnings"]
    assert expect_layout in {x["layout"] for x in layers}
    if tile is not None:
        tokens = next(x for x in layers if x["layout"] == "tokens")
        assert f"{tile[0]} x {tile[1]}" in tokens["note"] and tokens["channels_total"] == 768
