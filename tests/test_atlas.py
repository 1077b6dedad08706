"""`actviz atlas`: the layout keeps planted clusters apart, the cells equal brute force, the
same seed gives the same map, the supported class is argmax(W . mean + b) recomputed, a model
mapped against itself stays where it was, and the command end to end (spatial points, icons,
resume, colourings, the page, the card, every refusal).

UMAP's numba compile takes tens of seconds on first use, so the tests that run UMAP carry the
``umap`` marker, which the default run deselects (``pytest -m umap`` runs them); the others
lay out with PCA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

import actviz
from actviz.atlas.cells import bin_points, normalize_layout
from actviz.atlas.options import AtlasOptions
from actviz.atlas.reduce import fit_pca, reducer
from actviz.cli import app
from tests.conftest import make_image
from tests.oracles import cell_means_brute, knn_accuracy, trustworthiness

TINY = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )


def thin():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 1, 3, padding=1), nn.Flatten(), nn.Linear(1024, 2))
"""


def _colours() -> np.ndarray:
    """Eight fully saturated hues, RGB in 0-1."""
    import colorsys

    return np.asarray([colorsys.hsv_to_rgb(k / 8, 1.0, 1.0) for k in range(8)])


def planted_clusters(
    per: int = 100, dims: int = 512, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Eight clusters: eight colours through one fixed random projection to ``dims``, with
    noise, ``per`` points each."""
    rng = np.random.default_rng(seed)
    projection = rng.normal(size=(3, dims))
    labels = np.repeat(np.arange(8), per)
    colours = _colours()[labels] + rng.normal(scale=0.05, size=(len(labels), 3))
    vectors = colours @ projection + rng.normal(scale=0.3, size=(len(labels), dims))
    return vectors.astype(np.float32), labels


def _layout(vectors: np.ndarray, reduce: str, seed: int = 0) -> np.ndarray:
    opts = AtlasOptions(layer="x", reduce=reduce, seed=seed)  # type: ignore[arg-type]
    pca = fit_pca(vectors, 50)
    return normalize_layout(reducer(reduce).layout(pca.coords, opts))


@pytest.mark.parametrize("reduce", ["pca", pytest.param("umap", marks=pytest.mark.umap)])
def test_planted_clusters_stay_apart(reduce: str) -> None:
    vectors, labels = planted_clusters()
    xy = _layout(vectors, reduce)
    assert xy.shape == (800, 2) and xy.min() >= 0 and xy.max() <= 1
    assert knn_accuracy(xy, labels, k=5) >= 0.95
    assert trustworthiness(vectors, xy, k=10) >= 0.9


@pytest.mark.umap
def test_umap_same_seed_same_layout_and_another_seed_another() -> None:
    vectors, _ = planted_clusters(per=40)
    first, again = _layout(vectors, "umap", seed=3), _layout(vectors, "umap", seed=3)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, _layout(vectors, "umap", seed=4))


def test_pca_is_exact_and_signed_the_same_way() -> None:
    vectors, _ = planted_clusters(per=20, dims=64)
    pca = fit_pca(vectors, 5)
    centred = vectors.astype(np.float64) - vectors.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(pca.variance, s[:5] ** 2 / (len(vectors) - 1), rtol=1e-6)
    for got, want in zip(pca.components, vt[:5], strict=True):
        want = want if want[np.argmax(np.abs(want))] > 0 else -want
        np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(pca.coords, centred @ pca.components.T, atol=1e-3)
    assert sum(pca.explained) <= 1 + 1e-9


def test_cell_counts_and_means_equal_brute_force() -> None:
    rng = np.random.default_rng(1)
    xy = rng.random((500, 2)).astype(np.float32)
    xy[:5] = [[0, 0], [1, 1], [0.999999, 0], [0.5, 0.5], [1, 0]]  # edges belong to the last cells
    vectors = rng.normal(size=(500, 7)).astype(np.float32) * 10
    cells = bin_points(xy, vectors, grid=6, min_count=15, nearest=3)
    brute = cell_means_brute(xy, vectors, 6)
    assert int(cells.counts.sum()) == 500
    assert {c: int(n) for c, n in enumerate(cells.counts) if n} == {
        c: n for c, (n, _) in brute.items()
    }
    assert list(cells.kept) == sorted(c for c, (n, _) in brute.items() if n >= 15)
    for j, cell in enumerate(cells.kept):
        np.testing.assert_allclose(cells.means[j], brute[int(cell)][1], rtol=1e-6, atol=1e-5)
        members = np.flatnonzero(cells.cell == cell)
        distance = ((vectors[members].astype(np.float64) - brute[int(cell)][1]) ** 2).sum(axis=1)
        want = members[np.argsort(distance, kind="stable")[:3]]
        assert list(cells.nearest[j]) == list(want)
    assert cells.dropped_points == sum(n for n, _ in brute.values() if n < 15)


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve pictures in two class folders, and the tiny model beside them."""
    root = tmp_path_factory.mktemp("atlas")
    (root / "tiny.py").write_text(TINY)
    for i in range(12):
        make_image(root / "photos" / f"c{i % 2}" / f"p{i:02d}.png", size=(40, 36), seed=i)
    return root


def _tiny(folder: Path, name: str = "build") -> str:
    return f"{folder / 'tiny.py'}:{name}"


FAST: dict[str, Any] = {"reduce": "pca", "input_size": (32, 32), "grid": 3, "min_count": 1}


def test_pooled_atlas_files_and_counts(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = actviz.atlas(_tiny(folder), folder / "photos", layer="2", out=out, **FAST)
    record = json.loads((out / "atlas.json").read_text())
    assert record["command"] == "atlas" and record["layer"] == "2"
    assert record["points"]["count"] == 12 and record["points"]["images"] == 12
    assert record["random_weights"] is False  # the factory's own weights
    assert sum(c["count"] for c in record["cells"]) + record["grid"]["dropped_points"] == 12
    assert record["readout"]["linear"] is False  # a ReLU lies between layer 2 and the readout
    assert all(c["class"] is None for c in record["cells"])
    table = pq.read_table(out / "points.parquet").to_pylist()
    assert len(table) == 12
    assert {r["label"] for r in table} == {"c0", "c1"}
    assert all(0 <= r["x"] <= 1 and 0 <= r["y"] <= 1 and r["row"] is None for r in table)
    counts = np.bincount([r["cell"] for r in table], minlength=9)
    assert {c["cell"]: c["count"] for c in record["cells"]} == {
        c: int(n) for c, n in enumerate(counts) if n
    }
    assert record["colour"]["name"] == "class"  # two class folders: coloured by them
    means = np.load(out / "cell-means.npy")
    assert means.shape == (len(record["cells"]), 16)
    for name in ("atlas.png", "atlas.html", "atlas-tiles.png"):
        assert (out / name).stat().st_size > 0
    assert result.points == 12 and result.layer == "2" and result.report == out / "atlas.html"


def test_spatial_points_and_their_patches(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    actviz.atlas(
        _tiny(folder), folder / "photos", layer="1", points="spatial:5", out=out, nearest=2, **FAST
    )
    table = pq.read_table(out / "points.parquet").to_pylist()
    assert len(table) == 60
    per_image: dict[str, set[tuple[int, int]]] = {}
    for r in table:
        assert 0 <= r["row"] < 32 and 0 <= r["col"] < 32
        per_image.setdefault(r["image"], set()).add((r["row"], r["col"]))
    assert all(len(places) == 5 for places in per_image.values())  # distinct positions
    record = json.loads((out / "atlas.json").read_text())
    assert record["points"]["per_image"] == 5
    near = [n for c in record["cells"] for n in c["nearest"]]
    assert near and all(len(n["position"]) == 2 for n in near)
    # The same seed draws the same positions again (a resume would take the same ones).
    again = tmp_path / "again"
    actviz.atlas(_tiny(folder), folder / "photos", layer="1", points="spatial:5", out=again, **FAST)
    assert pq.read_table(again / "points.parquet").to_pylist() == table


def test_same_seed_gives_the_same_map(folder: Path, tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        actviz.atlas(_tiny(folder), folder / "photos", layer="2", out=tmp_path / name, **FAST)
        runs.append(pq.read_table(tmp_path / name / "points.parquet").to_pydict())
    assert runs[0]["x"] == runs[1]["x"] and runs[0]["y"] == runs[1]["y"]


@pytest.mark.umap
def test_umap_end_to_end_same_seed(folder: Path, tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        actviz.atlas(
            _tiny(folder),
            folder / "photos",
            layer="1",
            points="spatial:4",
            reduce="umap",
            out=tmp_path / name,
            input_size=(32, 32),
            grid=4,
            min_count=1,
        )
        runs.append(pq.read_table(tmp_path / name / "points.parquet").to_pydict())
    assert runs[0]["x"] == runs[1]["x"] and runs[0]["y"] == runs[1]["y"]
    record = json.loads((tmp_path / "a" / "atlas.json").read_text())
    assert record["reduce"]["name"] == "umap" and "random_state 0" in record["reduce"]["words"]


@pytest.mark.slow
def test_resnet18_cell_class_is_argmax_of_the_readout_of_its_mean(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    for i in range(10):
        make_image(photos / f"p{i}.png", size=(64, 48), seed=i)
    out = tmp_path / "out"
    actviz.atlas(
        "resnet18",
        photos,
        layer="layer4",
        weights="none",
        reduce="pca",
        input_size=(64, 64),
        grid=3,
        min_count=1,
        out=out,
    )
    record = json.loads((out / "atlas.json").read_text())
    assert record["readout"] == {
        "linear": True,
        "module": "fc",
        "rule": "argmax(W . mean + b) of the cell's mean vector",
        "reason": None,
    }
    assert "RANDOM WEIGHTS" not in json.dumps(record["warnings"])  # asked for: --weights none
    assert record["random_weights"] is True
    # Recomputed here: the same model, its own forward, layer4 pooled by hand.
    loaded = actviz.load_model("resnet18", weights="none", input_size=(64, 64))
    from PIL import Image

    captured: list[torch.Tensor] = []
    handle = loaded.module.layer4.register_forward_hook(
        lambda _m, _a, o: captured.append(o.detach().mean(dim=(2, 3)))
    )
    try:
        with torch.inference_mode():
            x = torch.stack(
                [
                    loaded.preprocess(Image.open(photos / f"p{i}.png").convert("RGB"))
                    for i in range(10)
                ]
            )
            loaded.module(x)
    finally:
        handle.remove()
    pooled = {f"p{i}.png": captured[0][i].double() for i in range(10)}
    table = pq.read_table(out / "points.parquet").to_pylist()
    fc = loaded.module.fc
    assert record["cells"]
    for cell in record["cells"]:
        members = [r["image"] for r in table if r["cell"] == cell["cell"]]
        assert len(members) == cell["count"]
        mean = torch.stack([pooled[m] for m in members]).mean(dim=0)
        logits = fc.weight.double() @ mean + fc.bias.double()
        assert cell["class"] == int(logits.argmax())
        assert cell["class_name"] == loaded.categories[cell["class"]]


def test_against_itself_puts_every_point_where_it_was(folder: Path, tmp_path: Path) -> None:
    factory = _tiny(folder)
    model = actviz.load_model(factory)
    checkpoint = tmp_path / "same.pt"
    torch.save(model.module.state_dict(), checkpoint)
    alone, joint = tmp_path / "alone", tmp_path / "joint"
    actviz.atlas(factory, folder / "photos", layer="2", out=alone, **FAST)
    result = actviz.atlas(
        factory, folder / "photos", layer="2", out=joint, against=checkpoint, ridge=1e-6, **FAST
    )
    assert result.against is not None and result.against["r2"] > 0.999999
    rows = pq.read_table(joint / "points.parquet").to_pylist()
    a = {r["image"]: (r["x"], r["y"]) for r in rows if r["model"] == "A"}
    b = {r["image"]: (r["x"], r["y"]) for r in rows if r["model"] == "B"}
    assert set(a) == set(b) and len(a) == 12
    for image in a:
        assert np.allclose(a[image], b[image], atol=1e-4), image
    # Model B's own predictions (the same model: the same ones as A's).
    predicted = {(r["model"], r["image"]): r["prediction"] for r in rows}
    assert all(predicted[("A", i)] == predicted[("B", i)] is not None for i in a)
    before = {
        r["image"]: (r["x"], r["y"]) for r in pq.read_table(alone / "points.parquet").to_pylist()
    }
    images = sorted(a)
    for axis in (0, 1):
        old = np.array([before[i][axis] for i in images])
        new = np.array([a[i][axis] for i in images])
        slope, intercept = np.polyfit(old, new, 1)
        assert slope > 0 and np.abs(old * slope + intercept - new).max() < 1e-4  # only rescaled
    record = json.loads((joint / "atlas.json").read_text())
    assert all(c["counts"]["A"] == c["counts"]["B"] for c in record["cells"])
    assert record["against"]["model"] == result.against["model"]


def test_colour_by_a_unit_and_by_prediction(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "unit"
    actviz.atlas(_tiny(folder), folder / "photos", layer="2", out=out, color="unit:3", **FAST)
    record = json.loads((out / "atlas.json").read_text())
    assert record["colour"]["name"] == "unit:3" and record["colour"]["kind"] == "continuous"
    table = pq.read_table(out / "points.parquet").to_pydict()
    means = np.load(out / "cell-means.npy")
    for cell in record["cells"]:
        values = [
            v for v, c in zip(table["unit_3"], table["cell"], strict=True) if c == cell["cell"]
        ]
        assert cell["colour"]["mean"] == pytest.approx(np.mean(values), rel=1e-5)
        assert means[cell["mean_row"], 3] == pytest.approx(np.mean(values), rel=1e-4, abs=1e-6)
    pred = tmp_path / "pred"
    actviz.atlas(_tiny(folder), folder / "photos", layer="2", out=pred, color="pred", **FAST)
    rows = pq.read_table(pred / "points.parquet").to_pylist()
    assert all(
        0 <= r["prediction"] < 4 and r["prediction_name"] == f"class {r['prediction']}"
        for r in rows
    )


def test_icons_through_optimize(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    actviz.atlas(
        _tiny(folder),
        folder / "photos",
        layer="2",
        out=out,
        icons="fv",
        icon_steps=2,
        icon_size=32,
        **FAST,
    )
    record = json.loads((out / "atlas.json").read_text())
    from PIL import Image

    with Image.open(out / "atlas-icons.png") as sheet:
        assert sheet.width == 32 * min(32, len(record["cells"]))
    assert [c["icon"] for c in record["cells"]] == list(range(len(record["cells"])))
    assert record["icons"]["steps"] == 2


def test_resume_reuses_the_points_and_refuses_other_settings(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    actviz.atlas(_tiny(folder), folder / "photos", layer="2", out=out, **FAST)
    again = actviz.atlas(
        _tiny(folder), folder / "photos", layer="2", out=out, resume=True, **{**FAST, "grid": 2}
    )
    assert again.reused == 12 and again.grid == 2
    record = json.loads((out / "atlas.json").read_text())
    assert record["images"]["reused"] == 12 and record["grid"]["size"] == 2
    with pytest.raises(actviz.ActvizError, match="was written with layer=2 \\(now 0\\)"):
        actviz.atlas(_tiny(folder), folder / "photos", layer="0", out=out, resume=True, **FAST)


def test_page_draws_a_sample_but_counts_every_point(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz.report.atlas as page

    monkeypatch.setattr(page, "SCATTER_POINTS", 20)
    out = tmp_path / "out"
    actviz.atlas(_tiny(folder), folder / "photos", layer="1", points="spatial:4", out=out, **FAST)
    html = (out / "atlas.html").read_text()
    assert "20 of 48 points drawn" in html
    data = json.loads(html.split('id="atlas-data">')[1].split("</script>")[0])
    assert len(data["scatter"]["x"]) == 20 and data["scatter"]["total"] == 48
    record = json.loads((out / "atlas.json").read_text())
    assert sum(c["count"] for c in data["cells"]) == sum(c["count"] for c in record["cells"])
    assert "http://" not in html and "https://" not in html  # nothing fetched


def test_card_says_random_weights_first(folder: Path, tmp_path: Path) -> None:
    result = actviz.atlas(
        _tiny(folder), folder / "photos", layer="2", out=tmp_path / "out", weights="auto", **FAST
    )
    html = result._repr_html_()
    assert "actviz atlas" in html and "data:image/png;base64," in html
    assert "no supported class" in html
    assert "AtlasResult(" in repr(result)


# ---------------------------------------------------------------------- refusals


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["atlas", *args])
    return result.exit_code, result.stderr


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two pictures at the top of a folder: no class folders, fewer than PCA needs."""
    root = tmp_path_factory.mktemp("few")
    for i in range(2):
        make_image(root / f"p{i}.png", size=(40, 36), seed=i)
    return root


@pytest.mark.parametrize(
    ("model", "inputs", "args", "message"),
    [
        ("build", "photos", ["--layer", "nope"], "nope"),
        ("thin", "photos", ["--layer", "0"], "gives vectors of 1 channel"),
        ("build", "few", ["--layer", "2"], "2 image(s) give 2 point(s), and --reduce pca needs"),
        ("build", "photos", ["--layer", "0", "--color", "unit:99"], "the layer has 8 units"),
        (
            "build",
            "few",
            ["--layer", "2", "--points", "spatial:4", "--color", "class"],
            "no class folder",
        ),
        ("build", "photos", ["--layer", "0", "--points", "spatial:0"], "--points takes pooled"),
        ("build", "photos", ["--layer", "0", "--color", "hue"], "--color takes class"),
        ("build", "photos", ["--layer", "0", "--against-layer", "1"], "give --against"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(
    folder: Path, few: Path, tmp_path: Path, model: str, inputs: str, args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    where = few if inputs == "few" else folder / "photos"
    code, stderr = _cli(
        _tiny(folder, model),
        str(where),
        "-o",
        str(out),
        "--reduce",
        "pca",
        "--input-size",
        "32,32",
        *args,
    )
    assert code == 2, stderr
    assert message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_umap_without_its_extra_names_the_fix(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "umap" else real(name, *a)
    )
    out = tmp_path / "out"
    code, stderr = _cli(_tiny(folder), str(folder / "photos"), "--layer", "2", "-o", str(out))
    assert code == 2
    assert "pip install 'actviz[atlas]'" in stderr and "--reduce pca" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not out.exists()
