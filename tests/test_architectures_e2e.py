"""The architectures people ask about, end to end with their default selectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image, run_images

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
    layers = run_images(out)[0]["layers"]
    assert 5 <= len(layers) <= 120, len(layers)
    assert all(x["file"] for x in layers), [x["name"] for x in layers if not x["file"]]
    assert not manifest["undrawable"] and not manifest["warnings"]
    assert expect_layout in {x["layout"] for x in layers}
    if tile is not None:
        tokens = next(x for x in layers if x["layout"] == "tokens")
        assert f"{tile[0]} x {tile[1]}" in tokens["note"] and tokens["channels_total"] == 768


def test_all_skips_the_modules_that_never_run_with_one_warning(tmp_path: Path) -> None:
    """vit_b_16's attention calls its 12 out_proj layers' weights, never the modules."""
    image = make_image(tmp_path / "in" / "x.png", size=(90, 70))
    args = ["-w", "none", "--no-images", "--no-report", "-q"]
    result = CliRunner().invoke(
        app, ["run", "vit_b_16", str(image), "-l", "all", "-o", str(tmp_path / "a"), *args]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["warnings"] == [
        "12 selected modules never run in the forward pass and were skipped: "
        "encoder.layers.encoder_layer_0.self_attention.out_proj, "
        "encoder.layers.encoder_layer_1.self_attention.out_proj, "
        "encoder.layers.encoder_layer_2.self_attention.out_proj..."
    ]
    assert result.stderr.count("warning:") == 1 and "12 selected modules" in result.stderr
    assert not any("out_proj" in name for name in manifest["layers"])
    assert "encoder.layers.encoder_layer_0.mlp.0" in manifest["layers"]
    assert {x["module"] for x in run_images(tmp_path / "a")[0]["layers"]} == set(manifest["layers"])

    # A module typed by its name stays selected, and the run says that it never ran.
    named = "encoder.layers.encoder_layer_0.self_attention.out_proj"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "vit_b_16",
            str(image),
            "-l",
            f"{named},conv_proj",
            "-o",
            str(tmp_path / "b"),
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["layers"] == ["conv_proj", named]
    assert manifest["warnings"] == [f"layer {named} was selected but never ran in the forward pass"]

    # list-layers marks what run would capture.
    listing = CliRunner().invoke(app, ["list-layers", "vit_b_16", "-l", "all", "--json"])
    rows = json.loads(listing.stdout)["layers"]
    marked = {row["name"] for row in rows if row["selected"]}
    assert named not in marked and "encoder.layers.encoder_layer_0.mlp.0" in marked
    assert all(row["calls"] > 0 for row in rows if row["selected"])


def test_segmentation_model_names_its_classes_and_draws_a_class_map(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    image = make_image(tmp_path / "in" / "x.png", size=(180, 120))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", "lraspp_mobilenet_v3_large", str(image), "-w", "none", "-o", str(out), "-q"],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["selector"] == "conv,classifier"
    record = run_images(out)[0]
    assert record["size"] == [180, 120] and record["note"] is None
    head = next(x for x in record["layers"] if x["name"] == "classifier")
    # The preset resizes 180x120 to 780x520 and does not crop; the head works at stride 8.
    assert head["shape"] == [1, 21, 65, 98] and head["channels_total"] == 21

    view = np.asarray(Image.open(out / "x" / "input.png").convert("RGB"))
    assert view.shape == (520, 780, 3)
    picture = np.asarray(Image.open(out / "x" / "segmentation.png").convert("RGB"))
    assert picture.shape[1] > 780 and picture.shape[0] >= 520
    # Under the title lines, the left part is the view, each pixel blended with its class's
    # colour (or left alone for the background): it follows the input, it is not flat.
    body = picture[-520:, :780].astype(int)
    assert np.abs(body - view).mean() > 5
    assert body.std() > 1


def test_channel_names_label_the_tiles() -> None:
    import numpy as np

    from actviz.render import render_grid

    maps = np.random.default_rng(0).normal(size=(3, 20, 30)).astype(np.float32)
    plain = render_grid(maps, title="head")
    named = render_grid(maps, title="head", channel_names=["__background__", "aeroplane", "cat"])
    assert named.channels_shown == plain.channels_shown == 3
    assert not np.array_equal(named.indices, plain.indices)


def test_images_the_model_barely_sees_are_named_with_what_it_saw(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "in"
    folder.mkdir()
    Image.new("RGB", (900, 300), (200, 30, 30)).save(folder / "wide.png")
    Image.new("RGB", (1, 1), (0, 200, 0)).save(folder / "dot.png")
    make_image(folder / "photo.png", size=(64, 48))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", "resnet18", str(folder), "-w", "none", "-l", "conv1", "-o", str(out), "-q"],
    )
    assert result.exit_code == 0, result.output
    wide = (
        f"image {folder / 'wide.png'} is 900x300: the model saw a 224x224 centre crop of a "
        "768x256 resize, i.e. 26% of the image"
    )
    dot = f"image {folder / 'dot.png'} is 1x1: upsampled 256x; the maps show no structure"
    stderr = " ".join(result.stderr.split())  # rich may wrap long lines
    assert wide in stderr and dot in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["images"]["count"], manifest["images"]["ok"]) == (3, 3)
    notes = {Path(i["path"]).name: i["note"] for i in run_images(out)}
    assert notes == {"wide.png": wide, "dot.png": dot, "photo.png": None}
