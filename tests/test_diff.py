"""actviz diff: the CKA estimator, the pictures, two models and two images end to end, and the
CLI's usage errors."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from actviz.diff.metrics import (
    MIN_GROUP,
    LayerComparison,
    biased_hsic,
    cosine_similarity,
    hold_back,
    relative_l2,
    unbiased_hsic,
)
from tests.oracles import linear_cka

# --------------------------------------------------------------------------- the estimator


def _direct_hsic(k: np.ndarray, lm: np.ndarray) -> float:
    """Song et al. (2012), eq. 5, term by term with explicit sums: the reference."""
    n = k.shape[0]
    kt = k * (1 - np.eye(n))
    lt = lm * (1 - np.eye(n))
    first = sum(kt[i, j] * lt[j, i] for i in range(n) for j in range(n))
    second = kt.sum() * lt.sum() / ((n - 1) * (n - 2))
    third = 2 / (n - 2) * sum(kt[i, :].sum() * lt[:, i].sum() for i in range(n))
    # 1^T K L 1 = sum_i (row sum of K)_i (column sum of L)_i for symmetric matrices.
    return float((first + second - third) / (n * (n - 3)))


def _features(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 40)).astype(np.float32)
    y = (x @ rng.normal(size=(40, 30)) + 2 * rng.normal(size=(n, 30))).astype(np.float32)
    return x, y


def test_unbiased_hsic_matches_the_formula_term_by_term() -> None:
    x, y = _features(9)
    k, lm = x.astype(np.float64) @ x.T.astype(np.float64), y.astype(np.float64) @ y.T
    assert unbiased_hsic(k, lm) == pytest.approx(_direct_hsic(k, lm), rel=1e-10)
    with pytest.raises(ValueError, match="at least 4"):
        unbiased_hsic(k[:3, :3], lm[:3, :3])


def test_streamed_cka_is_the_sum_of_per_batch_hsic_in_float64() -> None:
    x, y = _features(40, seed=1)
    comparison = LayerComparison()
    for start in range(0, 40, 8):
        comparison.add(x[start : start + 8], y[start : start + 8])
    kl = kk = ll = 0.0
    for start in range(0, 40, 8):
        a = x[start : start + 8].astype(np.float64)
        b = y[start : start + 8].astype(np.float64)
        kl += _direct_hsic(a @ a.T, b @ b.T)
        kk += _direct_hsic(a @ a.T, a @ a.T)
        ll += _direct_hsic(b @ b.T, b @ b.T)
    result = comparison.cka()
    assert result.defined and result.estimator == "unbiased"
    assert (result.images, result.groups) == (40, 5)
    assert result.value == pytest.approx(kl / math.sqrt(kk * ll), rel=1e-9)
    assert 0.3 < result.value < 0.99  # related, not identical


def test_debiased_cka_approaches_the_biased_one_for_large_n() -> None:
    x, y = _features(1500, seed=2)
    comparison = LayerComparison()
    comparison.add(x, y)
    biased = linear_cka(x, y, unbiased=False)
    assert comparison.cka().value == pytest.approx(biased, abs=0.02)
    # And on a small sample the biased estimator is visibly higher for unrelated features.
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(12, 500)), rng.normal(size=(12, 500))
    assert linear_cka(a, b, unbiased=False) > abs(linear_cka(a, b)) + 0.3


def test_identical_features_give_exactly_one_and_scaling_does_not_matter() -> None:
    x, _ = _features(16, seed=4)
    same = LayerComparison()
    same.add(x, x.copy())
    assert same.cka().value == pytest.approx(1.0, abs=1e-12)
    assert same.cosine == pytest.approx(1.0, abs=1e-12) and same.rel_l2 == pytest.approx(
        0, abs=1e-7
    )
    scaled = LayerComparison()
    scaled.add(x, 3 * x)  # CKA is blind to isotropic scaling, the relative L2 is not
    assert scaled.cka().value == pytest.approx(1.0, abs=1e-9)
    assert scaled.cosine == pytest.approx(1.0) and scaled.rel_l2 == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("a_value", "b_value", "expected"),
    [(0.0, 0.0, 1.0), (5.0, 5.0, 1.0), (5.0, 7.0, 0.0)],
)
def test_constant_layers_give_the_documented_value_never_nan(
    a_value: float, b_value: float, expected: float
) -> None:
    comparison = LayerComparison()
    for _ in range(3):
        comparison.add(np.full((8, 4, 5, 5), a_value, np.float32), np.full((8, 4, 5, 5), b_value))
    result = comparison.cka()
    assert result.value == expected and not result.defined
    assert "do not vary" in (result.note or "")
    assert comparison.cosine is not None and math.isfinite(comparison.cosine)


def test_a_layer_that_varies_against_one_that_does_not_gives_zero() -> None:
    x, _ = _features(8, seed=5)
    comparison = LayerComparison()
    comparison.add(x, np.ones_like(x))
    result = comparison.cka()
    assert (result.value, result.defined) == (0.0, False)
    assert "B does not vary" in (result.note or "")


def test_cosine_and_relative_l2_have_defined_values_for_zero_rows() -> None:
    a = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    b = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [-1.0, -1.0]])
    assert cosine_similarity(a, b).tolist() == pytest.approx([1.0, 0.0, 0.0, -1.0], abs=1e-15)
    assert relative_l2(a, b).tolist() == pytest.approx([0.0, 1.0, 1.0, 2.0])


def test_small_batches_wait_for_a_full_group_and_small_folders_use_the_biased_estimator() -> None:
    x, y = _features(11, seed=6)
    # 11 images in batches of 5, 5, 1: the second batch holds 3 back for the last one.
    comparison = LayerComparison()
    comparison.add(x[:5], y[:5], hold=hold_back(6))
    comparison.add(x[5:10], y[5:10], hold=hold_back(1))
    comparison.add(x[10:], y[10:], hold=hold_back(0))
    result = comparison.cka()
    assert (result.images, result.groups, result.note) == (11, 2, None)
    assert hold_back(0) == 0 and hold_back(1) == 3 and hold_back(MIN_GROUP) == 0
    # Three images in all: the biased estimator, said so.
    few = LayerComparison()
    few.add(x[:2], y[:2], hold=hold_back(1))
    few.add(x[2:3], y[2:3])
    small = few.cka()
    assert small.estimator == "biased" and small.images == 3
    k = x[:3].astype(np.float64) @ x[:3].T.astype(np.float64)
    lm = y[:3].astype(np.float64) @ y[:3].T.astype(np.float64)
    expected = biased_hsic(k, lm) / math.sqrt(biased_hsic(k, k) * biased_hsic(lm, lm))
    assert small.value == pytest.approx(expected, rel=1e-9)


# --------------------------------------------------------------------------- pictures


def test_difference_panels_share_channels_and_centre_zero() -> None:
    from actviz.diff.pictures import DIFF_CMAP, PictureScale, compose, render_diff
    from actviz.render import CENTER_LEVEL, N_LEVELS, palette_for

    rng = np.random.default_rng(0)
    a = rng.normal(size=(32, 6, 6)).astype(np.float32)
    b = a.copy()
    b[[3, 17]] += 2.0  # two channels differ
    scale = PictureScale()
    scale.update(a, b)
    panels = render_diff(a, b, titles=("A", "B", "B - A"), scale=scale, max_channels=4)
    # The two channels that differ are chosen, then the first by index; all three agree.
    assert panels.channels == (0, 1, 3, 17)
    for grid in (panels.a, panels.b, panels.diff):
        assert grid.channel_ids == (0, 1, 3, 17) and grid.channels_total == 32
    assert panels.diff.cmap == DIFF_CMAP and panels.diff.signed
    assert panels.a.vmin == panels.b.vmin and panels.a.vmax == panels.b.vmax  # one range
    picture, boxes = compose(panels, ["caption"])
    assert len(boxes) == 3 and picture.mode == "P"  # one palette: RdBu_r for all three
    assert picture.width == boxes[2][0] + boxes[2][2] > boxes[1][0] > boxes[0][0] == 0
    grids = (panels.a, panels.b, panels.diff)
    tops = {box[1] + grid.header_height for box, grid in zip(boxes, grids, strict=True)}
    assert len(tops) == 1  # the tiles line up, however the headers wrap

    same = PictureScale()
    same.update(a, a)
    zero = render_diff(a, a.copy(), titles=("A", "B", "B - A"), scale=same).diff
    body = zero.indices[zero.header_height :]
    drawn = body[body < N_LEVELS]  # colormap levels, not gaps or labels
    assert drawn.size > 32 * 36 and (drawn == CENTER_LEVEL).all()
    centre = palette_for(DIFF_CMAP)[CENTER_LEVEL]
    assert centre.min() > 230  # RdBu_r's centre is (near) white


def test_non_negative_layers_keep_viridis_beside_the_diverging_difference() -> None:
    from actviz.diff.pictures import DIFF_CMAP, PictureScale, compose, render_diff
    from actviz.render import CENTER_LEVEL, palette_for

    a = np.zeros((4, 8, 8), np.float32)
    a[:, 2:6, 2:6] = 1.0  # a bright square, like a post-ReLU map
    b = a.copy()
    b[0, 0, 0] = 0.5  # one pixel differs
    scale = PictureScale()
    scale.update(a, b)
    panels = render_diff(a, b, titles=("A", "B", "B - A"), scale=scale)
    assert panels.a.cmap == "viridis" and panels.diff.cmap == DIFF_CMAP
    picture, boxes = compose(panels, ["caption"])
    rgb = np.asarray(picture.convert("RGB"))
    colours = {
        name: {tuple(c) for c in rgb[y : y + h, x : x + w].reshape(-1, 3)}
        for name, (x, y, w, h) in zip("ab", boxes[:2], strict=True)
    }
    viridis = palette_for("viridis")
    assert tuple(viridis[0]) in colours["a"] and tuple(viridis[250]) in colours["a"]
    x, y, w, h = boxes[2]
    diff_colours = {tuple(c) for c in rgb[y : y + h, x : x + w].reshape(-1, 3)}
    assert tuple(palette_for(DIFF_CMAP)[CENTER_LEVEL]) in diff_colours  # zero: white


def test_vectors_are_drawn_as_one_cell_per_channel() -> None:
    from actviz.diff.pictures import PictureScale, render_diff

    a = np.linspace(-1, 1, 10, dtype=np.float32)
    b = a.copy()
    b[7] = 3.0
    scale = PictureScale()
    scale.update(a, b)
    panels = render_diff(a, b, titles=("A", "B", "B - A"), scale=scale, max_channels=3)
    assert panels.channels == (0, 1, 7) and panels.channels_total == 10


# --------------------------------------------------------------------------- end to end

SMALL = ["--input-size", "64,64", "-q"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """resnet18 with random weights twice (byte-identical), and once with only
    layer2.0.conv2's weights perturbed."""
    import torch
    import torchvision

    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(1)
    state = torchvision.models.resnet18().state_dict()
    torch.save(state, root / "a.pt")
    torch.save(state, root / "a_again.pt")
    weight = state["layer2.0.conv2.weight"]
    generator = torch.Generator().manual_seed(2)
    noise = torch.randn(weight.shape, generator=generator)
    state["layer2.0.conv2.weight"] = weight + 0.5 * weight.std() * noise
    torch.save(state, root / "b.pt")
    return {"a": root / "a.pt", "a_again": root / "a_again.pt", "b": root / "b.pt"}


@pytest.fixture(scope="module")
def photos(make_photos: Callable[..., Path]) -> Path:
    root = make_photos([(48 + 8 * i, 40 + 4 * i) for i in range(6)], name="img{i}.png")
    (root / "notes.txt").write_text("not an image")
    return root


def _diff(args: list[str]) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from actviz.cli import app

    result = CliRunner().invoke(app, ["diff", *args])
    return result.exit_code, result.stdout, result.stderr


def test_identical_checkpoints_are_identical_on_every_layer(
    tmp_path: Path, checkpoints: dict[str, Path], photos: Path
) -> None:
    out = tmp_path / "same"
    args = [
        str(photos),
        "--weights",
        str(checkpoints["a"]),
        "--against",
        str(checkpoints["a_again"]),
    ]
    code, stdout, _ = _diff(["resnet18", *args, "-o", str(out), "--images", "2", *SMALL])
    assert code == 0, stdout
    assert "no divergent layer: cosine >= 0.99 on all 20 layers" in stdout
    record = json.loads((out / "diff.json").read_text())
    assert record["mode"] == "models" and record["first_divergent"] is None
    assert len(record["layers"]) == 20 and record["layers"][0]["name"] == "conv1"
    for layer in record["layers"]:
        assert layer["cka"] == pytest.approx(1.0, abs=1e-6), layer
        assert layer["cosine"] == pytest.approx(1.0, abs=1e-6), layer
        assert layer["rel_l2"] == pytest.approx(0.0, abs=1e-6), layer
    assert record["a"]["weights"]["source"] == "checkpoint"
    assert record["a"]["model_info"]["source"] == "torchvision"
    assert record["b"]["model_info"]["preprocessing"]["std"] == pytest.approx([0.229, 0.224, 0.225])
    assert record["b"]["weights"]["name"] == str(checkpoints["a_again"])
    assert record["cka"]["images"] == 6 and record["inputs"][0]["status"] == "ok"
    assert record["skipped"][0]["path"].endswith("notes.txt")
    # Pictures for the first two images only: 20 each, B - A white everywhere.
    assert record["pictured_images"] == 2 and len(record["pictures"]) == 40
    picture = record["pictures"][0]
    assert picture["diff_range"] == 1.0  # no difference at all: the fallback range
    with Image.open(out / picture["file"]) as im:
        x, y, w, h = picture["panels"]["diff"]
        rgb = np.asarray(im.convert("RGB"))[y + h // 2 : y + h, x : x + w].reshape(-1, 3)
    from actviz.diff.pictures import DIFF_CMAP
    from actviz.render import BACKGROUND, CENTER_LEVEL, LABEL, TEXT, palette_for

    palette = palette_for(DIFF_CMAP)
    colours = {tuple(c) for c in np.unique(rgb, axis=0)}
    assert tuple(palette[CENTER_LEVEL]) in colours
    allowed = {tuple(palette[i]) for i in (CENTER_LEVEL, BACKGROUND, TEXT, LABEL)}
    assert colours <= allowed
    assert (out / "similarity.png").is_file() and (out / "diff.html").is_file()


def test_a_perturbed_convolution_is_the_first_divergent_layer(
    tmp_path: Path, checkpoints: dict[str, Path], photos: Path
) -> None:
    out = tmp_path / "perturbed"
    args = [str(photos), "--weights", str(checkpoints["a"]), "--against", str(checkpoints["b"])]
    code, stdout, _ = _diff(["resnet18", *args, "-o", str(out), "-b", "4", *SMALL])
    assert code == 0, stdout
    assert stdout.startswith("first divergent layer: layer2.0.conv2 (cosine 0.")
    assert "lowest cosine:" in stdout and stdout.splitlines()[3].split()[0] == "layer2.0.conv2"
    record = json.loads((out / "diff.json").read_text())
    assert record["first_divergent"] == "layer2.0.conv2"
    names = [layer["name"] for layer in record["layers"]]
    at = names.index("layer2.0.conv2")
    for layer in record["layers"][:at]:
        assert layer["cka"] == pytest.approx(1.0, abs=1e-6), layer
        assert layer["cosine"] == pytest.approx(1.0, abs=1e-6), layer
    hit = record["layers"][at]
    assert hit["cosine"] < 0.99 and hit["rel_l2"] > 0.05 and hit["cka"] < 1.0
    # Batches of 4 over 6 images: groups of 4 and 2 would not do; all 6 entered the CKA.
    assert record["cka"]["images"] == 6
    picture = next(p for p in record["pictures"] if p["layer"] == "layer2.0.conv2")
    assert picture["diff_range"] > 0 and len(picture["channels"]) == 16
    with Image.open(out / picture["file"]) as im:
        x, y, w, h = picture["panels"]["diff"]
        body = np.asarray(im.convert("RGB"))[y + h // 2 : y + h, x : x + w]
    assert len({tuple(c) for c in body.reshape(-1, 3)}) > 20  # a real difference map


NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, fill=0.0):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.flat = nn.Conv2d(4, 4, 1)  # a constant layer: zero weights, bias `fill`
        nn.init.zeros_(self.flat.weight)
        nn.init.constant_(self.flat.bias, fill)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = self.conv(x)
        return self.head((x + self.flat(x)).mean((2, 3)))


def build():
    return Net()


def build_ones():
    return Net(fill=1.0)
"""


def test_constant_layers_through_the_api_are_finite_and_documented(
    tmp_path: Path, photos: Path
) -> None:
    import actviz

    net = tmp_path / "net.py"
    net.write_text(NET)
    common = {"weights": "none", "layers": "all", "input_size": (32, 32), "images": 0}
    same = actviz.diff(
        f"{net}:build", [photos], against_model=f"{net}:build", out=tmp_path / "a", **common
    )
    flat = next(layer for layer in same.layers if layer.name == "flat")
    assert (flat.cka, flat.cka_defined, flat.cosine, flat.rel_l2) == (1.0, False, 1.0, 0.0)
    assert "do not vary" in (flat.note or "") and same.first_divergent is None
    assert [layer.name for layer in same.layers] == ["conv", "flat", "head"]
    assert same.layers[0].cka == pytest.approx(1.0, abs=1e-12) and same.layers[0].cka_defined

    other = actviz.diff(
        f"{net}:build", [photos], against_model=f"{net}:build_ones", out=tmp_path / "b", **common
    )
    flat = next(layer for layer in other.layers if layer.name == "flat")
    # Zeros against ones: CKA 0.0 (undefined, different), cosine 0.0, relative L2 1.0.
    assert (flat.cka, flat.cka_defined, flat.cosine, flat.rel_l2) == (0.0, False, 0.0, 1.0)
    assert other.first_divergent == "flat"
    record = json.loads(other.record.read_text())
    assert record["layers"][1]["cka_defined"] is False
    assert "0/0" in record["cka"]["undefined"] and "1.0" in record["cka"]["undefined"]
    assert not list((tmp_path / "b").glob("*/*.png"))  # --images 0: no pictures


def test_two_images_through_one_model(tmp_path: Path, photos: Path) -> None:
    import shutil

    first = photos / "img0.png"
    copy = shutil.copy(first, tmp_path / "<i>copy.png")  # a name the page must escape
    layers = ["--layers", "layer1.0.conv1,layer4.1.conv2,fc", "--weights", "none"]
    out = tmp_path / "same"
    code, stdout, _ = _diff(["resnet18", str(first), str(copy), "-o", str(out), *layers, *SMALL])
    assert code == 0, stdout
    assert "no divergent layer" in stdout and "cka" not in stdout.split("lowest")[1]
    record = json.loads((out / "diff.json").read_text())
    assert record["mode"] == "images" and record["cka"]["estimator"] is None
    assert [x["cka"] for x in record["layers"]] == [None, None, None]
    assert [x["cosine"] for x in record["layers"]] == [1.0, 1.0, 1.0]
    files = sorted(p["file"] for p in record["pictures"])
    assert files == [
        "diff/img0_vs_i_copy/00_layer1.0.conv1.png",
        "diff/img0_vs_i_copy/01_layer4.1.conv2.png",
        "diff/img0_vs_i_copy/02_fc.png",
    ]
    page = (out / "diff.html").read_text()
    assert "&lt;i&gt;copy.png" in page and "<i>copy" not in page
    assert "no divergent layer" in page and 'src="similarity.png"' in page
    assert "diff/img0_vs_i_copy/02_fc.png" in page

    def diff_panel(root: Path, picture: dict[str, object]) -> np.ndarray:
        x, y, w, h = picture["panels"]["diff"]  # type: ignore[index]
        with Image.open(root / str(picture["file"])) as im:
            boxes = picture["panels"]  # type: ignore[index]
            assert len(boxes) == 3 and im.width == x + w  # A | B | B - A
            return np.asarray(im.convert("RGB"))[y + h // 2 : y + h, x : x + w].reshape(-1, 3)

    from actviz.diff.pictures import DIFF_CMAP
    from actviz.render import CENTER_LEVEL, palette_for

    centre = palette_for(DIFF_CMAP)[CENTER_LEVEL]
    same_panel = diff_panel(out, record["pictures"][0])
    assert (same_panel == centre).all(axis=1).sum() > 1000

    out2 = tmp_path / "different"
    other = photos / "img3.png"
    code, stdout, _ = _diff(["resnet18", str(first), str(other), "-o", str(out2), *layers, *SMALL])
    assert code == 0 and stdout.startswith("first divergent layer: layer1.0.conv1")
    record = json.loads((out2 / "diff.json").read_text())
    page = (out2 / "diff.html").read_text()
    assert "First divergent layer" in page and "At the first divergent layer" in page
    panel = diff_panel(out2, record["pictures"][0])
    assert (panel == centre).all(axis=1).mean() < 0.2  # mostly not white: a real difference
    assert len(np.unique(panel, axis=0)) > 30


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{photos}"], "exactly two image files"),
        (["{photos}/img0.png"], "exactly two image files"),
        (["{photos}", "--against", "{tmp}/missing.pt"], "--against"),
        (["{photos}", "--against-model", "resnet34", "--weights", "none"], "layers differ"),
        (
            ["{photos}", "--against", "{photos}/img0.png", "--against-weights", "none"],
            "give one",
        ),
        (["{photos}/img0.png", "{photos}/img0.png"], "same file"),
    ],
)
def test_usage_errors_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, photos: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    argv = [a.format(photos=photos, tmp=tmp_path) for a in args]
    code, stdout, stderr = _diff(["resnet18", *argv, "-o", str(out), *SMALL])
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], stderr
    assert "Traceback" not in stderr and not stdout
    assert not out.exists()


def test_differing_layers_are_named_and_a_full_folder_is_refused(
    tmp_path: Path, photos: Path
) -> None:
    out = tmp_path / "out"
    argv = [str(photos), "--against-model", "resnet34", "--weights", "none", "-o", str(out)]
    _, _, stderr = _diff(["resnet18", *argv, *SMALL])
    assert "model A (resnet18) has no layer1.2.conv1, layer1.2.conv2" in stderr
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, stderr = _diff(["resnet18", *argv[:-2], "--against-model", "resnet18", "-o", str(out)])
    assert code == 2 and "--overwrite" in stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_pictured_images_across_batches_share_one_scale(tmp_path: Path, photos: Path) -> None:
    import actviz

    net = tmp_path / "net.py"
    net.write_text(NET)
    result = actviz.diff(
        f"{net}:build",
        [photos],
        against_model=f"{net}:build_ones",
        weights="none",
        layers="conv,flat",
        input_size=(32, 32),
        batch_size=2,
        images=3,  # two batches: drawn in a second pass over just these three
        out=tmp_path / "out",
    )
    assert result.pictured == 3 and len(result.pictures) == 6
    assert [p.image for p in result.pictures[::2]] == [
        str(photos / f"img{i}.png") for i in range(3)
    ]
    for layer in ("conv", "flat"):
        ranges = {p.diff_range for p in result.pictures if p.layer == layer}
        assert len(ranges) == 1  # one symmetric scale per layer across the images
    flat = next(p for p in result.pictures if p.layer == "flat")
    assert flat.diff_range == 1.0  # ones minus zeros
    assert all((tmp_path / "out" / p.file).is_file() for p in result.pictures)
