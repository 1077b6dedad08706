"""actviz top-images: the running top-k, receptive fields, pictures, resume, and the command.

The end-to-end tests use a model whose channel scores are known by construction (``Lamps``,
written to a file and loaded as ``lamps.py:build``): on solid grey images, channel 0 scores
the image's normalized brightness at map cell (1, 2), channel 1 its negation at (3, 0), and
channel 2 is zero everywhere (dead), so every order, tie and location is known exactly.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.render.legend import Header
from actviz.render.png import encode_png
from actviz.top_images import (
    Candidates,
    LayerTop,
    ReceptiveField,
    TopImagesOptions,
    TopK,
    plan_layers,
    top_images,
)
from actviz.top_images.fields import field_from_boxes
from actviz.top_images.sheets import SheetTile, contact_sheet
from actviz.top_images.topk import layer_candidates

LAMPS = '''
import torch
from torch import nn


class Body(nn.Module):
    """Three 4 x 4 maps from one number per image: its brightness m."""

    def forward(self, m):
        b = m.shape[0]
        out = torch.zeros(b, 3, 4, 4, dtype=m.dtype)
        out[:, 0] = m[:, None, None] - 1
        out[:, 0, 1, 2] = m
        out[:, 1] = -m[:, None, None] - 1
        out[:, 1, 3, 0] = -m
        return out


class Index(nn.Module):
    def forward(self, maps):
        return maps.flatten(1).argmax(dim=1)


class Lamps(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()
        self.index = Index()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        m = x[:, 0, 0, 0] * self.scale  # one pixel of a solid image: exact, no reduction
        maps = self.body(m)
        self.index(maps)
        return torch.stack([m, -m, torch.zeros_like(m)], dim=1)  # class 0 bright, 1 dark


def build():
    return Lamps()
'''

# Brightness of each solid grey image; a and c tie.
GREYS = {"a.png": 200, "b.png": 50, "c.png": 200, "d.png": 120, "e.png": 10, "f.png": 250}


def _norm(v: int) -> float:
    return (v / 255 - 0.485) / 0.229


@pytest.fixture(scope="module")
def lamps(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("lamps")
    (root / "lamps.py").write_text(LAMPS)
    photos = root / "photos"
    photos.mkdir()
    for name, v in GREYS.items():
        Image.fromarray(np.full((40, 40, 3), v, np.uint8)).save(photos / name)
    return f"{root / 'lamps.py'}:build", photos


def _run(lamps: tuple[str, Path], out: Path, **kw: Any) -> Any:
    model, photos = lamps
    kw = {"layers": "body", "k": 3, "input_size": (32, 32), "tile": 32, **kw}
    return top_images(model, [photos], out=out, **kw)


def _names(entries: list[dict[str, Any]]) -> list[str]:
    return [Path(e["path"]).name for e in entries]


@pytest.fixture(scope="module")
def lamps_run(lamps: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _run(lamps, tmp_path_factory.mktemp("run") / "out", batch_size=4)


# ------------------------------------------------------------------ the known model


def test_known_model_order_ties_locations_and_health(lamps_run: Any) -> None:
    doc = json.loads(lamps_run.json.read_text())
    assert doc == lamps_run.document
    assert doc["k"] == 3 and doc["score"] == "max" and doc["images"] == 6
    assert doc["model"].endswith("lamps.py:build") and doc["failed"] == []
    (layer,) = doc["layers"]
    assert layer["name"] == "body" and layer["maps"] == [3, 4, 4] and layer["layout"] == "nchw"
    assert layer["receptive_field"]["whole_image"] is True  # one pixel feeds every cell
    bright, dark, dead = layer["channels"]
    # Brightest first; a and c tie at 200 and come in path order.
    assert _names(bright["top"]) == ["f.png", "a.png", "c.png"]
    assert [e["score"] for e in bright["top"]] == pytest.approx(
        [_norm(250), _norm(200), _norm(200)], abs=1e-6
    )
    assert {(e["y"], e["x"]) for e in bright["top"]} == {(1, 2)}
    assert _names(dark["top"]) == ["e.png", "b.png", "d.png"]
    assert {(e["y"], e["x"]) for e in dark["top"]} == {(3, 0)}
    # All zero: ties everywhere, broken by path; the location is the first cell.
    assert _names(dead["top"]) == ["a.png", "b.png", "c.png"]
    assert [(e["score"], e["y"], e["x"]) for e in dead["top"]] == [(0.0, 0, 0)] * 3
    # Health over the whole folder: brightness above ImageNet's mean for 3 of 6 images.
    assert (bright["active_frac"], dark["active_frac"], dead["active_frac"]) == (0.5, 0.5, 0.0)
    assert (bright["dead"], dead["dead"], layer["dead_channels"]) == (False, True, 1)
    assert bright["mean_score"] == pytest.approx(np.mean([_norm(v) for v in GREYS.values()]))
    assert bright["max_score"] == pytest.approx(_norm(250), abs=1e-6)
    # Selectivity: the model predicts class 0 for bright images and 1 for dark ones.
    assert bright["selectivity"] == {"class": 0, "label": None, "count": 3, "fraction": 1.0}
    assert dark["selectivity"]["class"] == 1 and dark["selectivity"]["fraction"] == 1.0
    # A dead channel's top images are ties at zero in path order: no class to speak of.
    assert dead["selectivity"] is None
    summary = lamps_run.layers[0]
    assert (summary.dead, summary.selective_channel, summary.selective_count) == (1, 0, 3)


def test_json_schema(lamps_run: Any) -> None:
    doc = lamps_run.document
    for key in ("model", "weights", "device", "selector", "k", "score", "images", "failed"):
        assert key in doc
    layer = doc["layers"][0]
    for key in ("name", "type", "maps", "receptive_field", "overview", "channels", "images"):
        assert key in layer
    for channel in layer["channels"]:
        assert set(channel) >= {
            "channel",
            "sheet",
            "top",
            "active_frac",
            "dead",
            "mean_score",
            "max_score",
            "selectivity",
        }
        assert len(channel["top"]) == doc["k"]
        scores = [e["score"] for e in channel["top"]]
        assert scores == sorted(scores, reverse=True)
        for entry in channel["top"]:
            assert set(entry) == {"path", "score", "y", "x"}
            assert isinstance(entry["path"], str) and isinstance(entry["score"], float)
            assert isinstance(entry["y"], int) and isinstance(entry["x"], int)
        assert (lamps_run.out / channel["sheet"]).is_file()


def test_batch_size_does_not_change_the_result(lamps: tuple[str, Path], tmp_path: Path) -> None:
    one = _run(lamps, tmp_path / "one", batch_size=1, report=False)
    five = _run(lamps, tmp_path / "five", batch_size=5, report=False)
    assert one.document["layers"] == five.document["layers"]


def test_resume_gives_the_json_of_an_uninterrupted_run(
    lamps: tuple[str, Path], lamps_run: Any, tmp_path: Path
) -> None:
    class StopAfter:
        def __init__(self, n: int) -> None:
            self.n = n
            self.seen: list[str] = []

        def warn(self, message: str) -> None:
            pass

        def start(self, total: int) -> None:
            pass

        def advance(self, result: Any) -> None:
            self.seen.append(result.status)
            self.n -= 1
            if self.n == 0:
                raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        _run(lamps, out, batch_size=2, reporter=StopAfter(3))
    assert (out / ".actviz-top-images.npz").is_file()
    assert not (out / "top-images.json").exists()
    assert not [p for p in out.rglob("*") if "actviz-tmp" in p.name]
    reporter = StopAfter(0)
    resumed = _run(lamps, out, batch_size=4, resume=True, reporter=reporter)
    assert resumed.reused == 4 and reporter.seen == ["reused"] * 4 + ["ok"] * 2
    assert resumed.document == lamps_run.document | {"report": resumed.document["report"]}
    assert json.loads((out / "top-images.json").read_text()) == resumed.document
    # The pictures too: views kept from the pass and views decoded again are the same.
    for channel in resumed.document["layers"][0]["channels"]:
        pixels = [
            np.asarray(Image.open(run.out / channel["sheet"])) for run in (resumed, lamps_run)
        ]
        assert np.array_equal(*pixels), channel["sheet"]


def test_resume_with_other_settings_is_refused(lamps: tuple[str, Path], tmp_path: Path) -> None:
    model, photos = lamps
    out = tmp_path / "out"
    _run(lamps, out, report=False)
    base = ["top-images", model, str(photos), "-l", "body", "--input-size", "32,32", "-o", str(out)]
    result = CliRunner().invoke(app, [*base, "-k", "2", "--resume"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "k=3 (now 2)" in result.stderr
    result = CliRunner().invoke(app, [*base, "-k", "3"])  # neither --resume nor --overwrite
    assert result.exit_code == 2 and "--overwrite" in result.stderr
    (out / ".actviz-top-images.npz").write_bytes(b"not a zip file")
    result = CliRunner().invoke(app, [*base, "-k", "3", "--resume"])
    assert result.exit_code == 1 and "damaged" in result.stderr and "--overwrite" in result.stderr
    assert result.stderr.count("\n") == 1
    result = CliRunner().invoke(app, [*base, "-k", "2", "--overwrite", "-q"])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "top-images.json").read_text())
    assert doc["k"] == 2
    # The model as the run manifest records it: source and the preprocessing actually used.
    assert doc["model_info"]["source"] == "factory"
    assert len(doc["model_info"]["preprocessing"]["mean"]) == 3


# ------------------------------------------------------------------ the accumulator


def _random_layer(rng: np.random.Generator, paths: list[str], channels: int) -> dict[str, Any]:
    n = len(paths)
    scores = rng.normal(size=(n, channels)).astype(np.float32)
    scores[rng.random((n, channels)) < 0.2] = 1.5  # many exact ties
    return {
        "scores": scores,
        "active": scores > 0,
        "ys": rng.integers(0, 4, (n, channels)),
        "xs": rng.integers(0, 4, (n, channels)),
        "heat": rng.random((n, channels, 2, 2)).astype(np.float32),
        "origin": rng.integers(0, 2, (n, channels, 2)),
        "classes": rng.integers(0, 3, n),
    }


def _take(data: dict[str, Any], rows: list[int], paths: list[str], k: int) -> Candidates:
    layer = layer_candidates(
        [paths[i] for i in rows],
        data["scores"][rows],
        data["active"][rows],
        data["ys"][rows],
        data["xs"][rows],
        data["heat"][rows],
        data["origin"][rows],
        data["classes"][rows],
        k,
    )
    return Candidates({"layer": layer}, tuple(paths[i] for i in rows))


def _same(a: LayerTop, b: LayerTop) -> None:
    for name, array in a.arrays().items():
        assert np.array_equal(array, b.arrays()[name]), name
    assert a.sums == b.sums and a.images == b.images


def test_merge_is_independent_of_batching_order_and_workers() -> None:
    rng = np.random.default_rng(0)
    paths = [f"img{i:03d}.png" for i in range(40)]
    data = _random_layer(rng, paths, channels=5)
    k = 4
    whole = TopK(k)
    whole.update(_take(data, list(range(40)), paths, k))
    # Batches of 3 in reverse order.
    batched = TopK(k)
    for start in reversed(range(0, 40, 3)):
        batched.update(_take(data, list(range(start, min(start + 3, 40))), paths, k))
    # Two workers with interleaved shares, merged on the "driver".
    left, right = TopK(k), TopK(k)
    for i in range(40):
        (left if i % 2 else right).update(_take(data, [i], paths, k))
    right.merge(left)
    for other in (batched, right):
        _same(whole.layers["layer"], other.layers["layer"])
    top = whole.layers["layer"]
    # The order by construction: score descending, ties by path ascending.
    for c in range(5):
        expected = sorted(range(40), key=lambda i: (-data["scores"][i, c], paths[i]))[:k]
        assert [str(p) for p in top.paths[c]] == [paths[i] for i in expected]
        assert top.mean(c) == pytest.approx(float(data["scores"][:, c].astype(np.float64).mean()))
    # Small and picklable: what a remote worker sends.
    import pickle

    candidates = _take(data, [0, 1, 2], paths, k)
    assert pickle.loads(pickle.dumps(candidates)).layers["layer"].paths.tolist() == (
        candidates.layers["layer"].paths.tolist()
    )


def test_nan_scores_sort_last() -> None:
    paths = ["a", "b", "c"]
    scores = np.array([[np.nan], [1.0], [-np.inf]], np.float32)
    zeros = np.zeros((3, 1), np.int32)
    layer = layer_candidates(
        paths,
        scores,
        scores > 0,
        zeros,
        zeros,
        np.zeros((3, 1, 1, 1)),
        np.zeros((3, 1, 2)),
        np.zeros(3),
        3,
    )
    assert [str(p) for p in layer.paths[0]] == ["b", "c", "a"]
    assert int(layer.nonfinite[0]) == 2 and layer.mean(0) == 1.0


def test_view_cache_keeps_only_wanted_views_within_its_budget() -> None:
    import torch

    from actviz.models.preprocessing import Preprocessing
    from actviz.top_images.draw import ViewCache

    class Loaded:
        preprocess = Preprocessing(4, (2, 2))

    x = torch.zeros(3, 2, 2)  # the ImageNet mean: mid grey after de-normalization
    cache = ViewCache(Loaded(), budget=2 * 12)  # type: ignore[arg-type]
    cache.offer([("a", x), ("b", x), ("c", x)], wanted={"a", "b", "c"})
    assert sorted(cache.views) == ["a", "b"] and cache.size == 24  # the third does not fit
    assert cache.views["a"].shape == (2, 2, 3) and cache.views["a"][0, 0].tolist() == [
        124,
        116,
        104,
    ]
    cache.offer([("c", x)], wanted={"b", "c"})  # "a" left every top-k: its room is reused
    assert sorted(cache.views) == ["b", "c"] and cache.size == 24


# ------------------------------------------------------------------ receptive fields


def _field(layers: Any, names: list[str], size: int = 32) -> dict[str, ReceptiveField]:
    import torch

    from actviz.layouts import layer_contexts

    torch.manual_seed(0)
    model = torch.nn.Sequential(*layers).eval()
    planned = plan_layers(
        model,
        names,
        layer_contexts(model, (size, size)),
        input_size=(size, size),
        in_chans=3,
        device=torch.device("cpu"),
        model_name="stack",
    )
    return {key: plan.receptive for key, plan in planned.plans.items()}


def test_receptive_fields_of_known_conv_stacks() -> None:
    from torch import nn

    fields = _field(
        [
            nn.Conv2d(3, 4, 3, padding=1),
            nn.Conv2d(4, 4, 3, padding=1),  # two 3 x 3: 5 x 5
            nn.Conv2d(4, 4, 3, stride=2, padding=1),  # + stride 2: 7 x 7, map 16 x 16
            nn.Conv2d(4, 4, 3, padding=1),  # 3 x 3 on the stride-2 map: 11 x 11
        ],
        ["1", "2", "3"],
    )
    assert fields["1"].box(10, 20) == (8, 13, 18, 23)  # rows 8..12, columns 18..22
    assert fields["1"].size == (5, 5) and fields["1"].stride == (1.0, 1.0)
    assert fields["1"].box(0, 31) == (0, 3, 29, 32)  # clipped at the borders
    # Cell y of the stride-2 map is centred on input pixel 2y+1 and sees rows 2y-3 .. 2y+3.
    assert fields["2"].stride == (2.0, 2.0) and fields["2"].box(5, 5) == (7, 14, 7, 14)
    assert fields["3"].box(8, 8) == (11, 22, 11, 22) and fields["3"].size == (11, 11)
    assert not fields["3"].whole_image


def test_fields_past_the_image_and_untouched_sides() -> None:
    from torch import nn

    layers = [nn.Conv2d(3, 4, 9, stride=4, padding=4), nn.Conv2d(4, 4, 9, padding=4)]
    wide = _field(layers, ["1"], size=32)["1"]
    assert wide.size == (32, 32) and (wide.up, wide.down) == (22.0, 19.0)  # 41 pixels
    assert not wide.whole_image and wide.box(0, 0) == (0, 21, 0, 21)
    assert _field(layers, ["1"], size=16)["1"].whole_image  # 41 pixels on 16 x 16
    # A side that touched the border in every probe reaches past the image.
    measured = field_from_boxes((10, 10), (10, 10), [((5, 5), (0, 10, 3, 8)), ((0, 0), None)])
    assert (measured.up, measured.down, measured.left, measured.right) == (None, None, 2.5, 2.5)
    assert measured.box(9, 0) == (0, 10, 0, 3)


# ------------------------------------------------------------------ pictures


def test_contact_sheet_has_its_tiles_labels_and_header() -> None:
    colours = [(250, 0, 0), (0, 250, 0), (0, 0, 250)]
    tiles = [
        SheetTile(np.full((32, 32, 3), colour, np.uint8), f"#{i + 1}  0.5", f"img{i}.png")
        for i, colour in enumerate(colours)
    ]
    header = Header("layer4   channel 7", "best 3 of 10 images", ("0", "1"), nonfinite=False)
    sheet = contact_sheet(tiles, header, tile=32, cmap="turbo")
    assert sheet.dtype == np.uint8 and sheet.shape[2] == 3
    for colour in colours:  # each tile is there, whole
        hits = np.all(sheet == colour, axis=2)
        assert hits.sum() == 32 * 32
        rows, cols = np.nonzero(hits)
        assert rows.max() - rows.min() == 31 and cols.max() - cols.min() == 31
    header_band = sheet[: np.nonzero(np.all(sheet == colours[0], axis=2))[0].min()]
    light = np.all(header_band > 200, axis=2)
    assert light.sum() > 200  # the title and info text
    below = sheet[np.nonzero(np.all(sheet == colours[0], axis=2))[0].max() + 1 :]
    assert np.all(below > 200, axis=2).sum() > 50  # the score and file name under each tile
    # Written losslessly by actviz's PNG encoder.
    back = np.asarray(Image.open(io.BytesIO(encode_png(sheet))).convert("RGB"))
    assert np.array_equal(back, sheet)
    for subtitle in (("channel 1",), ("channel 2", "dead")):
        kw: dict[str, Any] = {"subtitle": subtitle, "tile": 32, "cmap": "turbo"}
        data = encode_png(contact_sheet(tiles, header, **kw), row_filter="up")
        back = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert np.array_equal(back, contact_sheet(tiles, header, **kw))


def test_written_sheet_and_overview(lamps_run: Any) -> None:
    layer = lamps_run.document["layers"][0]
    sheet = np.asarray(Image.open(lamps_run.out / layer["channels"][0]["sheet"]).convert("RGB"))
    overview = np.asarray(Image.open(lamps_run.out / layer["overview"]).convert("RGB"))
    for picture in (sheet, overview):
        assert picture.shape[1] >= 3 * 32
        assert np.unique(picture.reshape(-1, 3), axis=0).shape[0] > 20  # not blank
    # The overview has a row per channel: 3 rows of 32-pixel tiles under the header.
    assert overview.shape[0] > 3 * 32
    # The brightest tile of channel 0 (a 250-grey image) is there, light grey under its heat.
    assert (sheet.mean(axis=2) > 150).sum() > 32 * 32 * 0.5


# ------------------------------------------------------------------ architectures


VIT_AND_SWIN = """
import torchvision


def vit():
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )


def swin():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(
        patch_size=[4, 4], embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=[2, 2],
        num_classes=5,
    )
"""


@pytest.mark.slow
def test_vit_tokens_and_swin_channels_last(tmp_path: Path) -> None:
    (tmp_path / "arch.py").write_text(VIT_AND_SWIN)
    photos = tmp_path / "photos"
    rng = np.random.default_rng(0)
    for i in range(2):
        photos.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), np.uint8)).save(photos / f"{i}.png")
    vit = top_images(
        f"{tmp_path / 'arch.py'}:vit",
        [photos],
        layers="conv_proj,encoder.layers.encoder_layer_1",
        out=tmp_path / "vit",
        input_size=(32, 32),
        k=2,
        tile=32,
        report=False,
    ).document
    proj, block = vit["layers"]
    assert proj["maps"] == [16, 4, 4] and proj["receptive_field"]["height"] == 8
    assert block["layout"] == "tokens" and "class token dropped" in block["note"]
    assert block["maps"] == [16, 4, 4] and block["receptive_field"]["whole_image"] is True
    assert len(block["channels"]) == 16 and len(block["channels"][0]["top"]) == 2
    swin = top_images(
        f"{tmp_path / 'arch.py'}:swin",
        [photos],
        layers="features.1",
        out=tmp_path / "swin",
        input_size=(32, 32),
        k=2,
        tile=32,
        report=False,
    ).document
    (stage,) = swin["layers"]
    assert stage["layout"] == "nhwc" and stage["output_shape"] == [8, 8, 8]
    assert stage["maps"] == [8, 8, 8]  # 8 channels of 8 x 8
    field = stage["receptive_field"]
    assert 4 < field["height"] < 32 and field["stride"] == [4.0, 4.0]


# ------------------------------------------------------------------ the command


@pytest.mark.slow
def test_cli_end_to_end_with_an_unreadable_image(lamps: tuple[str, Path], tmp_path: Path) -> None:
    model, photos = lamps
    folder = tmp_path / "photos"
    folder.mkdir()
    for path in photos.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.html").write_text("<html>a run report</html>")
    result = CliRunner().invoke(
        app,
        [
            "top-images",
            model,
            str(folder),
            "-l",
            "body",
            "-k",
            "2",
            "--input-size",
            "32,32",
            "-o",
            str(tmp_path / "out"),
            "--overwrite",
        ],
    )
    assert result.exit_code == 3, result.output
    assert "broken.png" in result.stderr
    assert "body: 3 channels, 1 dead" in result.stdout
    assert "most selective: channel 0 (2 of 2 top images predicted class 0)" in result.stdout
    doc = json.loads((tmp_path / "out" / "top-images.json").read_text())
    assert doc["images"] == 6 and [Path(f["path"]).name for f in doc["failed"]] == ["broken.png"]
    index = (tmp_path / "out" / "top-images.html").read_text()
    assert 'href="index.html"' in index  # the run report in the same folder
    layer_page = tmp_path / "out" / doc["layers"][0]["folder"] / "index.html"
    channel_page = layer_page.parent / Path(doc["layers"][0]["channels"][1]["sheet"]).name
    assert "e.png" in channel_page.with_suffix(".html").read_text()
    assert "c0000.html" in layer_page.read_text()


def test_errors_are_one_line_with_their_exit_code(lamps: tuple[str, Path], tmp_path: Path) -> None:
    model, photos = lamps
    runner = CliRunner()
    out = tmp_path / "out"
    common = ["--input-size", "32,32", "-o", str(out)]
    # A selection with nothing to rank: an integer output.
    result = runner.invoke(app, ["top-images", model, str(photos), "-l", "index", *common])
    assert result.exit_code == 2 and "none of the selected layers" in result.stderr
    assert "int64" in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()  # nothing half-written
    # A folder without images.
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    result = runner.invoke(app, ["top-images", model, str(empty), "-l", "body", *common])
    assert result.exit_code == 2 and "no images found" in result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()
    # Every image unreadable.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.png").write_bytes(b"nope")
    result = runner.invoke(app, ["top-images", model, str(bad), "-l", "body", *common])
    assert result.exit_code == 1 and "no image could be read" in result.stderr
    # Options checked before any work.
    with pytest.raises(Exception, match="k must be between 1 and 100"):
        TopImagesOptions(k=0)
    done = subprocess.run(
        [sys.executable, "-m", "actviz", "top-images", model, str(photos), "-k", "0"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "-k" in done.stderr


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"k": 101}, "k must be between 1 and 100"),
        ({"score": "median"}, "score=.median. is not a choice: use .max. or .mean."),
        ({"channels": -1}, "channels must be 0 (all) or more"),
        ({"tile": 8}, "tile must be 32 to 512 pixels"),
        ({"cmap": "virdis"}, "did you mean viridis"),
        ({"png_compression": 10}, "png_compression must be between 0 and 9"),
    ],
)
def test_option_errors_name_the_fix(keywords: dict[str, Any], message: str) -> None:
    from actviz.errors import UsageError

    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_flat(TopImagesOptions, COMMON_GROUPS, keywords, caller="top_images")
    with pytest.raises(TypeError, match="did you mean k"):
        from_flat(TopImagesOptions, COMMON_GROUPS, {"kk": 3}, caller="top_images")


# ------------------------------------------------------------------ any folder size


def test_resume_drops_a_torn_ledger_line_and_lines_no_state_covers(
    lamps: tuple[str, Path], lamps_run: Any, tmp_path: Path
) -> None:
    from actviz.errors import OutputError
    from actviz.top_images.checkpoint import FILE, LEDGER

    class StopAt:
        def __init__(self, n: int) -> None:
            self.n = n

        def warn(self, message: str) -> None:
            pass

        def start(self, total: int) -> None:
            pass

        def advance(self, result: Any) -> None:
            self.n -= 1
            if self.n == 0:
                raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        _run(lamps, out, batch_size=2, reporter=StopAt(3), report=False)
    with np.load(out / FILE, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
    # The state names no image: it counts them, and the ledger lists them.
    assert meta["images"] == 4 and "done" not in meta
    assert meta["ledger_bytes"] == (out / LEDGER).stat().st_size
    lines = (out / LEDGER).read_text().splitlines()
    assert [Path(p).name for line in lines for p in json.loads(line)] == list(GREYS)[:4]
    _, photos = lamps
    with (out / LEDGER).open("a") as fh:  # merged after the last save, then a line cut short
        fh.write(json.dumps([str(photos / "e.png")]) + "\n" + '["' + str(photos / "f.pn"))
    resumed = _run(lamps, out, batch_size=4, resume=True, report=False)
    assert resumed.reused == 4 and resumed.images == 6
    assert resumed.document["layers"] == lamps_run.document["layers"]
    done = [
        Path(p).name for line in (out / LEDGER).read_text().splitlines() for p in json.loads(line)
    ]
    assert sorted(done) == sorted(GREYS)  # each image once, the dropped lines gone
    # A ledger shorter than its state says: refused with the fix, never a wrong resume.
    with (out / LEDGER).open("r+b") as fh:
        fh.truncate(10)
    with pytest.raises(OutputError, match="shorter than the state.*overwrite=True"):
        _run(lamps, out, batch_size=4, resume=True, report=False)


def _feed(out: Path, n: int, batch: int = 50) -> int:
    """Merge ``n`` synthetic images (and n/50 failures) into a run's progress; the traced
    memory it holds afterwards."""
    import gc
    import tracemalloc

    from actviz.command import SilentReporter
    from actviz.top_images.progress import Progress as _Progress

    rng = np.random.default_rng(0)
    zeros = np.zeros
    # The input list exists before the run (pathlib interns its names and caches its text):
    # not traced.
    inputs = [Path(f"/img/{i:06d}.png") for i in range(n)]
    bad = [Path(f"/bad/{i:06d}.png") for i in range(0, n, batch)]
    for path in inputs + bad:
        str(path)
    tracemalloc.start()
    try:
        progress = _Progress(out, {"k": 3}, 3, None)
        with progress.saving():
            for start in range(0, n, batch):
                mine = inputs[start : start + batch]
                paths = [str(p) for p in mine]
                scores = rng.random((batch, 4), dtype=np.float32)
                xy = zeros((batch, 4), np.int32)
                found = layer_candidates(
                    paths, scores, scores > 0.5, xy, xy, zeros((batch, 4, 1, 1)),
                    zeros((batch, 4, 2)), np.full(batch, -1), 3,
                )  # fmt: skip
                progress.merge(
                    mine, [None] * batch, Candidates({"l": found}),
                    SilentReporter(),
                )  # fmt: skip
                progress.fail(bad[start // batch], "broken", SilentReporter())
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        progress.ledger.close()
        assert progress.failed.count == n // batch
        assert [str(p) for p, _ in progress.failed.shown()][:2] == [
            "/bad/000000.png",
            "/bad/000050.png",
        ]
        assert len(progress.failed.shown()) == min(n // batch, 100)
        return held
    finally:
        tracemalloc.stop()


def test_a_runs_memory_and_state_do_not_grow_with_the_number_of_images(tmp_path: Path) -> None:
    from actviz.top_images.checkpoint import FILE, load_checkpoint

    warm, small, large = tmp_path / "warm", tmp_path / "small", tmp_path / "large"
    for folder in (warm, small, large):
        folder.mkdir()
    _feed(warm, 500)  # caches filled on first use are not the run's
    held = [_feed(small, 5_000), _feed(large, 20_000)]
    # 100 or 400 failed: a hundred named either way; a list of the paths would be 120 kB more.
    assert held[1] < held[0] + 16_000, held
    sizes = [(where / FILE).stat().st_size for where in (small, large)]
    assert abs(sizes[1] - sizes[0]) < 32, sizes  # the counts' digits
    state = load_checkpoint(large, {"k": 3})
    assert state is not None and state.images == 20_000 and state.top.images == 20_000
    paths = state.paths(large)
    assert next(paths) == "/img/000000.png" and sum(1 for _ in paths) == 19_999


def test_the_document_names_at_most_a_hundred_failed_and_skipped_files(
    lamps: tuple[str, Path], lamps_run: Any
) -> None:
    from actviz.top_images.document import SHOWN, document

    doc = lamps_run.document
    assert doc["failed"] == [] and doc["failed_count"] == 0 and doc["skipped_count"] == 0
    many = [(Path(f"/x/{i:04d}.png"), "broken") for i in range(250)]
    capped = document(
        model="m", weights={}, device="cpu", selector="s", k=3, score="max",
        input_size=(32, 32), images=0, failed=many[:SHOWN], failed_count=250, skipped=many,
        plans=[], tops={}, files={}, categories=None, unranked=[], warnings=[], report=None,
    )  # fmt: skip
    assert capped["failed_count"] == capped["skipped_count"] == 250
    assert len(capped["failed"]) == len(capped["skipped"]) == SHOWN == 100
    assert capped["failed"][0] == {"path": "/x/0000.png", "reason": "broken"}


def test_the_report_counts_every_failed_image_and_lists_the_first(lamps_run: Any) -> None:
    from actviz.report import build_top_images_report

    doc = dict(lamps_run.document)
    doc["failed"] = [{"path": f"/x/{i:04d}.png", "reason": "broken"} for i in range(100)]
    doc["failed_count"] = 250
    page = build_top_images_report(doc, lamps_run.out)["top-images.html"].decode()
    assert "Failed images (250)" in page and page.count("<code>/x/0") == 100
    assert "The first 100 are listed; each was named on stderr as it failed." in page


def test_no_channel_is_called_most_selective_when_every_image_gets_one_class(
    tmp_path: Path,
) -> None:
    (tmp_path / "one.py").write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 4, 3)\n"
        "        self.head = nn.Linear(4, 3)\n"
        "        nn.init.zeros_(self.head.weight)\n"
        "        with torch.no_grad():\n"
        "            self.head.bias.copy_(torch.tensor([0.0, 1.0, 0.0]))\n\n"
        "    def forward(self, x):\n"
        "        return self.head(self.conv(x).mean((2, 3)))\n\n"
        "def build():\n"
        "    return Net()\n"
    )
    folder = tmp_path / "photos"
    folder.mkdir()
    from tests.conftest import make_image

    for i in range(4):
        make_image(folder / f"{i}.png", (24, 24), seed=i)
    argv = ["top-images", f"{tmp_path / 'one.py'}:build", str(folder), "-l", "conv", "-k", "2"]
    result = CliRunner().invoke(app, [*argv, "--input-size", "24,24", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    # Every channel's top images are class 1, as every image is: no channel stands out.
    assert "conv: 4 channels" in result.stdout and "most selective" not in result.stdout
    doc = json.loads((tmp_path / "o" / "top-images.json").read_text())
    picked = [c["selectivity"] for c in doc["layers"][0]["channels"]]
    assert [(s["class"], s["count"]) for s in picked] == [(1, 2)] * 4
