"""Principal components as colour: the same colours as a PCA computed directly, one fit for
the whole run (stable across runs and batch sizes), NCHW, channels-last and token layers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import actviz
from actviz.cli import app
from actviz.errors import UsageError
from actviz.run.pca import PcaSampler, fit_pca

from .conftest import run_images


def _two_regions(seed: int, images: int = 3) -> np.ndarray:
    """(images, 8, 12, 12): the left half holds one channel vector, the right half another,
    with a little noise."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=8), rng.normal(size=8)
    maps = np.empty((images, 8, 12, 12), np.float32)
    maps[:, :, :, :6] = a[None, :, None, None]
    maps[:, :, :, 6:] = b[None, :, None, None]
    return maps + rng.normal(scale=0.05, size=maps.shape).astype(np.float32)


def test_two_regions_two_colours() -> None:
    view = actviz.pca_view(_two_regions(0))
    assert len(view.images) == 3 and view.images[0].shape == (12, 12, 3)
    assert view.fit.explained[0] > 0.9  # one direction separates the regions
    for rgb in view.images:
        left = rgb[:, :6].reshape(-1, 3).astype(float)
        right = rgb[:, 6:].reshape(-1, 3).astype(float)
        # Each region is nearly one colour; the two colours are far apart.
        assert np.abs(left[:, 0] - left[:, 0].mean()).max() < 40
        assert np.abs(right[:, 0] - right[:, 0].mean()).max() < 40
        assert abs(left[:, 0].mean() - right[:, 0].mean()) > 150
    # The mask blanks the side where component 1 is negative, and only that side.
    masked = actviz.pca_view(_two_regions(0), mask=True)
    negative = view.projections[0][..., 0] < 0
    assert negative[:, :6].all() != negative[:, 6:].all()
    assert (masked.images[0][negative] == 0).all()
    assert (masked.images[0][~negative] == view.images[0][~negative]).all()


def test_equals_a_pca_computed_directly_with_torch() -> None:
    import torch

    rng = np.random.default_rng(1)
    # Channels with different spreads, so the components are well separated.
    maps = (rng.normal(size=(2, 6, 10, 10)) * np.arange(1, 7)[None, :, None, None]).astype(
        np.float32
    )
    view = actviz.pca_view(torch.from_numpy(maps))
    # Every position of both images is in the sample (200 < 4096): the direct PCA of all.
    x = torch.from_numpy(maps).permute(0, 2, 3, 1).reshape(-1, 6).double()
    centred = x - x.mean(0)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    direct = (centred @ vh[:3].T).numpy().reshape(2, 10, 10, 3)
    ours = np.stack(view.projections)
    for k in range(3):
        sign = np.sign((ours[..., k] * direct[..., k]).sum())
        np.testing.assert_allclose(ours[..., k], sign * direct[..., k], rtol=1e-4, atol=1e-4)
        # The sign convention: the largest loading of each component is positive.
        loadings = view.fit.components[k]
        assert loadings[np.abs(loadings).argmax()] > 0
    expected = (s[:3] ** 2 / (s**2).sum()).numpy()
    np.testing.assert_allclose(view.fit.explained, expected, rtol=1e-6)


def test_sample_is_capped_seeded_and_independent_of_order() -> None:
    maps = _two_regions(2, images=5)
    one, other = PcaSampler(5, max_vectors=100), PcaSampler(5, max_vectors=100)
    for i in range(5):
        one.add("k", i, maps[i])
    for i in reversed(range(5)):  # another order, as other batch sizes would give
        other.add("k", i, maps[i])
    a, b = one.fits()["k"], other.fits()["k"]
    assert a.vectors == 100 and a.images == 5
    np.testing.assert_array_equal(a.components, b.components)
    np.testing.assert_array_equal(a.low, b.low)


def test_fewer_than_three_channels_and_vectors_refused() -> None:
    fit = fit_pca(np.random.default_rng(0).normal(size=(50, 2)))
    assert fit.components.shape == (3, 2) and fit.explained[2] == 0.0
    with pytest.raises(UsageError, match="no spatial positions|cannot colour"):
        actviz.pca_view(np.ones((2, 16), np.float32))


@pytest.fixture(scope="module")
def photos(make_photos: Callable[..., Path]) -> Path:
    return make_photos(3)


def _run(photos: Path, out: Path, *extra: str, report: bool = False) -> Any:
    args = ["run", "resnet18", str(photos), "--weights", "none", "--layers", "layer1,layer3"]
    args += ["--input-size", "64,64", "--out", str(out), *extra]
    args += [] if report else ["--no-report"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text())


def _rows_holding(picture: np.ndarray, panel: np.ndarray) -> int | None:
    """The first row at which ``panel`` sits at the picture's left edge (4 px in), if any."""
    h, w = panel.shape[:2]
    for top in range(picture.shape[0] - h + 1):
        if np.array_equal(picture[top : top + h, 4 : 4 + w], panel):
            return top
    return None


def test_run_view_pca_same_bytes_across_runs_and_batch_sizes(photos: Path, tmp_path: Path) -> None:
    """The same run twice gives the same bytes. Another batch size gives the same colours to
    within one level at a few positions: the layers' outputs themselves change in their last
    bits with the batch's composition (the convolutions' arithmetic), which moves a colour
    lying at a level's edge."""
    first = _run(photos, tmp_path / "a", "--view", "pca", "--batch-size", "3", report=True)
    again = _run(photos, tmp_path / "c", "--view", "pca", "--batch-size", "3")
    second = _run(photos, tmp_path / "b", "--view", "pca", "--batch-size", "1", report=True)
    assert set(first["pca"]) == {"layer1", "layer3"} and again["pca"] == first["pca"]
    for key, record in first["pca"].items():
        other = second["pca"][key]
        assert other["explained_variance"] == pytest.approx(record["explained_variance"], abs=1e-5)
        assert {k: v for k, v in other.items() if k != "explained_variance"} == {
            k: v for k, v in record.items() if k != "explained_variance"
        }
    record = first["pca"]["layer1"]
    assert len(record["explained_variance"]) == 3 and record["images"] == 3
    assert 0 < sum(record["explained_variance"]) <= 1 and record["vectors"] <= 4096
    assert record["explained_variance"] == sorted(record["explained_variance"], reverse=True)
    files = []
    for image in run_images(tmp_path / "a"):
        for layer in image["layers"]:
            assert layer["pca"] == f"{image['out_dir']}/{Path(layer['file']).stem}_pca.png"
            files.append(layer["pca"])
    assert len(files) == 6
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "c" / rel).read_bytes()
        one = np.asarray(Image.open(tmp_path / "a" / rel)).astype(np.int16)
        other = np.asarray(Image.open(tmp_path / "b" / rel)).astype(np.int16)
        assert one.shape == other.shape and np.abs(one - other).max() <= 1, rel
        assert (one != other).any(axis=-1).mean() <= 0.01, rel
        picture = one.astype(np.uint8)
        # Under the header, what the model saw of this image (its own input.png, the band
        # that its pictures share), then the components as large: 64 px in one column.
        seen = np.asarray(Image.open(tmp_path / "a" / Path(rel).parent / "input.png"))
        assert seen.shape == (64, 64, 3)
        top = _rows_holding(picture, seen)
        assert top is not None, rel
        below = picture[top + 64 :]
        assert below.shape[0] > 64 and below.std() > 0
    # A run without the view writes none.
    plain = _run(photos, tmp_path / "plain")
    assert plain["pca"] is None
    assert all(layer["pca"] is None for layer in run_images(tmp_path / "plain")[0]["layers"])


def test_pca_mask_needs_the_view(photos: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "resnet18", str(photos), "--pca-mask", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "--view pca" in result.output
    result = CliRunner().invoke(
        app, ["run", "resnet18", str(photos), "--view", "umap", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "--view" in result.output


VIT = """
from torchvision.models import VisionTransformer


def build():
    return VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    )
"""


def test_token_layer_of_a_tiny_vit(photos: Path, tmp_path: Path) -> None:
    (tmp_path / "vit.py").write_text(VIT)
    model = f"{tmp_path / 'vit.py'}:build"
    out = tmp_path / "out"
    args = ["run", model, str(photos), "--layers", "encoder.layers.encoder_layer_1"]
    args += ["--input-size", "32,32", "--view", "pca", "--pca-mask", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "manifest.json").read_text())
    record = doc["pca"]["encoder.layers.encoder_layer_1"]
    # 4 x 4 patch tokens per image, the class token dropped: 16 positions from each image.
    assert record["vectors"] == 3 * 16 and record["images"] == 3
    layer = run_images(out)[0]["layers"][0]
    assert layer["pca"].endswith("_pca.png")
    assert np.asarray(Image.open(out / layer["pca"])).ndim == 3
    # The report shows it beside the grid.
    pages = "".join(p.read_text() for p in out.rglob("*.html"))
    assert Path(layer["pca"]).name in pages


def test_channels_last_layer(tmp_path: Path) -> None:
    import torch

    # (B, H, W, C): the same two regions, channels last.
    maps = torch.from_numpy(_two_regions(3)).permute(0, 2, 3, 1).contiguous()
    view = actviz.pca_view(maps, layout="nhwc")
    assert view.images[0].shape == (12, 12, 3)
    rgb = view.images[0].astype(float)
    assert abs(rgb[:, :6, 0].mean() - rgb[:, 6:, 0].mean()) > 150


def test_hugging_face_vit_token_layer(photos: Path, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    torch.manual_seed(0)
    transformers.ViTForImageClassification(config).eval().save_pretrained(tmp_path / "vit")
    out = tmp_path / "out"
    args = ["run", f"hf:{tmp_path / 'vit'}", str(photos), "--layers", "vit.layers.1"]
    args += ["--view", "pca", "--no-report", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "manifest.json").read_text())["pca"]["vit.layers.1"]
    assert record["vectors"] == 3 * 16  # 4 x 4 patches each, the class token dropped

    # A channel of the same token layer can be optimized too (channels last); the model takes
    # 32 x 32 only, so each transformed batch is resized to it.
    from actviz.optimize import optimize

    done = optimize(
        f"hf:{tmp_path / 'vit'}",
        layers="vit.layers.1",
        channels="0,5",
        steps=4,
        size=48,
        out=tmp_path / "opt",
    )
    assert done.layers[0].output_shape == (2, 17, 32)
    assert [c.channel for c in done.layers[0].channels] == [0, 5]


def test_fewer_positions_than_channels_matches_the_svd() -> None:
    import torch

    x = np.random.default_rng(4).normal(size=(40, 96)) * np.linspace(4, 1, 96)
    fit = fit_pca(x)
    centred = torch.from_numpy(x - x.mean(0))
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    for k in range(3):
        assert abs(float(np.dot(fit.components[k], vh[k].numpy()))) > 1 - 1e-6
    np.testing.assert_allclose(fit.explained, (s[:3] ** 2 / (s**2).sum()).numpy(), rtol=1e-6)


def _pngs(out: Path) -> dict[str, np.ndarray]:
    return {
        p.relative_to(out).as_posix(): np.asarray(Image.open(p))
        for p in sorted(out.rglob("*.png"))
        if "report" not in p.parts
    }


def test_a_batch_larger_than_a_draw_is_drawn_a_few_at_a_time_to_the_same_pictures(
    make_photos: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task draws a layer's pictures of a batch at most PCA_TOGETHER at once (memory does
    not grow with the batch size): 11 images in one batch, drawn 8 and 3, one by one or all
    together, give the same files."""
    import actviz.run.pictures as pictures

    photos = make_photos(11)
    runs = {}
    default = pictures.PCA_TOGETHER
    for together in (default, 1, 64):
        monkeypatch.setattr(pictures, "PCA_TOGETHER", together)
        out = tmp_path / str(together)
        _run(photos, out, "--view", "pca", "--batch-size", "11")
        runs[together] = {rel: (out / rel).read_bytes() for rel in _pngs(out)}
    assert sum(rel.endswith("_pca.png") for rel in runs[1]) == 22
    assert runs[default] == runs[1] == runs[64]


def test_the_kept_captures_are_let_go_before_the_second_pass(
    make_photos: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the budget, the images drawn from kept captures are drawn first: their captures
    (up to the budget) are freed before the other images run through the model again."""
    import gc
    import weakref

    import actviz.run.pca_pass as pca

    kept: list[weakref.ref[Any]] = []
    alive: list[int] = []
    real_add, real_second = pca.PcaPass.add_batch, pca.PcaPass._second_pass

    def add_batch(self: Any, captures: list[Any], jobs: Any, pool: Any = None) -> None:
        real_add(self, captures, jobs, pool)
        if self.rest is None:  # this batch is kept
            kept.extend(weakref.ref(c.tensor) for c in captures if c.tensor is not None)

    def second_pass(self: Any, *args: Any) -> None:
        gc.collect()
        alive.append(sum(ref() is not None for ref in kept))
        real_second(self, *args)

    monkeypatch.setattr(pca, "KEEP_BYTES", 400_000)  # one batch of two kept
    monkeypatch.setattr(pca.PcaPass, "add_batch", add_batch)
    monkeypatch.setattr(pca.PcaPass, "_second_pass", second_pass)
    _run(make_photos(6), tmp_path / "out", "--view", "pca", "--batch-size", "2")
    assert len(kept) == 2 and alive == [0]


def test_one_pass_draws_what_two_passes_drew(
    make_photos: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's pass keeps its batches and the PCA pictures are drawn from them after the
    fit; with nothing kept (every image through the model twice, as before) or with the
    budget spent after one batch, every picture is the same array, the broken image fails in
    its place, and the model ran once per image only when everything was kept."""
    import actviz.command.forward as forward
    import actviz.run.pca_pass as pca

    photos = make_photos(5)
    (photos / "p2b.png").write_bytes(b"not a png")  # fails between two good images
    seen: list[int] = []
    real = forward._call

    def counted(name: str, module: Any, x: Any, first: Path) -> Any:
        seen.append(int(x.shape[0]))
        return real(name, module, x, first)

    monkeypatch.setattr(forward, "_call", counted)
    runs: dict[str, tuple[dict[str, np.ndarray], list[Any], int, str]] = {}
    for name, budget in (("kept", pca.KEEP_BYTES), ("none", 0), ("cut", 400_000)):
        monkeypatch.setattr(pca, "KEEP_BYTES", budget)
        seen.clear()
        out = tmp_path / name
        args = ["run", "resnet18", str(photos), "--weights", "none", "-l", "layer1,layer3"]
        args += ["--input-size", "64,64", "-o", str(out), "--view", "pca", "-b", "2"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 3, result.output
        statuses = [(Path(i["path"]).name, i["status"]) for i in run_images(out)]
        runs[name] = (_pngs(out), statuses, sum(seen), result.output)
    kept, none, cut = runs["kept"], runs["none"], runs["cut"]
    assert kept[2] == 5 and none[2] == 10 and 5 < cut[2] < 10
    assert "second time" not in kept[3]
    assert "activations of 0 of 6 images" in none[3] and "second time" in none[3]
    assert "activations of 4 of 6 images fitted in the 0.3815 MiB" in cut[3]
    assert kept[1] == none[1] == cut[1]
    assert ("p2b.png", "failed") in kept[1] and len(kept[1]) == 6
    assert sum(1 for rel in kept[0] if rel.endswith("_pca.png")) == 10
    for other in (none, cut):
        assert other[0].keys() == kept[0].keys()
        for rel, picture in kept[0].items():
            assert np.array_equal(picture, other[0][rel]), rel


def test_a_panel_enlarged_as_it_is_pasted_equals_its_enlarged_copy() -> None:
    from actviz.render.panels import Panel, panel_sheet

    rng = np.random.default_rng(5)
    view = rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)
    for shape, scale in (((6, 6, 3), 8), ((12, 7, 3), 4), ((48, 48, 3), 1)):
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        copy = pixels.repeat(scale, axis=0).repeat(scale, axis=1)
        lines = ["a line", "another"]
        one = panel_sheet("t", lines, [Panel(view, "in"), Panel(pixels, "pc", scale=scale)])
        two = panel_sheet("t", lines, [Panel(view, "in"), Panel(copy, "pc")])
        assert np.array_equal(one, two), (shape, scale)
        # The sheet kept for the layout is not changed by the panels pasted on a copy of it.
        again = panel_sheet("t", lines, [Panel(view, "in"), Panel(copy, "pc")])
        assert np.array_equal(again, two)


def _plain_fit(
    images: int = 1, low: np.ndarray | None = None, high: np.ndarray | None = None
) -> Any:
    """A fit of four channels whose components are the first three channels, each scaled
    from 0 to 1 unless told."""
    from actviz.render.pca import PcaFit

    return PcaFit(
        mean=np.zeros(4, np.float32),
        components=np.eye(3, 4, dtype=np.float32),
        explained=(0.5, 0.3, 0.2),
        low=np.zeros(3, np.float32) if low is None else low,
        high=np.ones(3, np.float32) if high is None else high,
        vectors=10,
        images=images,
        seed=0,
    )


def test_the_picture_is_a_header_what_the_model_saw_and_the_components_in_one_column() -> None:
    import io

    from actviz.render.panels import text_band
    from actviz.render.pca import components_band, input_band, pca_lines, pca_png
    from actviz.render.png import Bands

    fit = _plain_fit(images=2)

    def picture(rgb: np.ndarray, view: np.ndarray | None = None) -> np.ndarray:
        png = pca_png(
            "layer",
            rgb,
            fit,
            Bands(row_filter="up"),
            view_shape=None if view is None else view.shape,
            view=None if view is None else (lambda: view),
        )
        return np.asarray(Image.open(io.BytesIO(png)))

    rng = np.random.default_rng(0)
    view = rng.integers(0, 256, (48, 40, 3), np.uint8)
    rgb = rng.integers(0, 256, (6, 5, 3), np.uint8)
    assert (
        "fitted once over 2 image(s), on 10 positions sampled from them (seed 0)"
        in (pca_lines(fit)[1])
    )
    header = text_band("layer", pca_lines(fit), 360)
    seen, components = input_band(view, 360), components_band(rgb, 360, view.shape)
    drawn = picture(rgb, view)
    assert np.array_equal(drawn, np.concatenate([header, seen, components]))
    assert drawn.shape[1] == header.shape[1] == 360  # the sheets' least width
    assert np.array_equal(seen[:48, 4:44], view)
    # Enlarged 8x (the largest whole factor within 48 x 40), each position a block.
    assert np.array_equal(components[:48, 4:44], rgb.repeat(8, 0).repeat(8, 1))
    # Without what the model saw: the header and the components, enlarged to about 224.
    alone = picture(rgb)
    assert np.array_equal(alone[: header.shape[0]], header)
    assert np.array_equal(alone[header.shape[0] :][:222, 4:189], rgb.repeat(37, 0).repeat(37, 1))
    # Components wider than what the model saw widen the picture instead of being cut.
    wide = rng.integers(0, 256, (10, 400, 3), np.uint8)
    widened = picture(wide, view)
    assert widened.shape[1] == 408
    assert np.array_equal(
        widened[-components_band(wide, 408, view.shape).shape[0] :][:10, 4:404], wide
    )


def test_pictures_of_a_layer_drawn_together_are_the_pictures_drawn_one_at_a_time() -> None:
    import io

    from actviz.render.pca import components_band, pca_png, pca_pngs
    from actviz.render.png import Bands

    fit = _plain_fit(images=3)
    rng = np.random.default_rng(1)
    views = [rng.integers(0, 256, (48, 40, 3), np.uint8) for _ in range(3)]
    rgbs = rng.integers(0, 256, (3, 6, 5, 3), np.uint8)
    shared = Bands(row_filter="up")
    together = pca_pngs(
        "layer",
        rgbs,
        fit,
        shared,
        view_shape=(48, 40),
        views=[lambda v=v: v for v in views],
        images=["a", "b", "c"],
        notes=["a note"],
    )
    for rgb, view, png, image in zip(rgbs, views, together, "abc", strict=True):
        alone = pca_png(
            "layer",
            rgb,
            fit,
            Bands(row_filter="up"),
            view_shape=(48, 40),
            view=lambda v=view: v,
            image=image,
            notes=["a note"],
        )
        assert png == alone
        drawn = np.asarray(Image.open(io.BytesIO(png)))
        below = components_band(rgb, drawn.shape[1], (48, 40)).shape[0]
        assert np.array_equal(drawn[-below:][:48, 4:44], rgb.repeat(8, 0).repeat(8, 1))
    # Each photo deflated once under its image's key, the header once for all three.
    assert {key[0] for key in shared._bands} == {"header", "input"}
    assert len(shared._bands) == 4


def test_wide_layers_find_their_top_components_by_iteration_equal_to_the_svd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From 256 channels the first three components come from a subspace iteration; on a
    nearly flat spectrum it gives up and the whole eigendecomposition answers. Both equal
    the SVD."""
    import actviz.run.pca as pca_module

    answers: list[Any] = []
    real = pca_module._top_axes

    def recorded(gram: Any, trace: float) -> Any:
        answers.append(real(gram, trace))
        return answers[-1]

    monkeypatch.setattr(pca_module, "_top_axes", recorded)
    rng = np.random.default_rng(5)
    # A few strong directions over many weak ones, as a layer's outputs have them, turned
    # away from the channel axes; and a nearly flat spectrum.
    scales = np.concatenate([[8.0, 6.0, 5.0, 3.0, 2.0], np.geomspace(1, 0.5, 295)])
    turn = np.linalg.qr(rng.normal(size=(300, 300)))[0]
    decaying = (rng.normal(size=(3000, 300)) * scales) @ turn
    flat = rng.normal(size=(3000, 300))
    for x, iterated in ((decaying, True), (flat, False)):
        answers.clear()
        fit = fit_pca(x)
        assert len(answers) == 1 and (answers[0] is not None) == iterated
        centred = x - x.mean(0)
        _, s, vh = np.linalg.svd(centred, full_matrices=False)
        cosines = np.abs((fit.components.astype(np.float64) * vh[:3]).sum(axis=1))
        np.testing.assert_allclose(cosines, 1, atol=1e-6)  # float32 components
        np.testing.assert_allclose(fit.explained, s[:3] ** 2 / (s**2).sum(), rtol=1e-10)
    # Below 256 channels the whole eigendecomposition answers at once.
    answers.clear()
    fit_pca(decaying[:, :200])
    assert answers == []


def test_colours_of_non_finite_and_out_of_range_projections() -> None:
    """Each component is scaled by the fit's 1st-99th percentile range: values past it are
    clipped to 0 and 255, NaN is 0 and infinities are the ends; masked positions (component
    1 negative) are black."""
    from actviz.render.pca import pca_rgb

    fit = _plain_fit(
        low=np.array([-1.0, 0.0, 2.0], np.float32),
        high=np.array([1.0, 4.0, 2.0], np.float32),  # no range: scaled by 1
    )
    values = [0.0, -2.0, 5.0, float("nan"), float("inf"), float("-inf"), 0.5]
    projected = np.array([[[v, v, v] for v in values]], np.float32)
    rgb = pca_rgb(projected, fit)
    assert rgb.dtype == np.uint8 and rgb.shape == (1, 7, 3)
    assert rgb[0, :, 0].tolist() == [128, 0, 255, 0, 255, 0, 191]
    assert rgb[0, :, 1].tolist() == [0, 0, 255, 0, 255, 0, 32]
    assert rgb[0, :, 2].tolist() == [0, 0, 255, 0, 255, 0, 0]
    masked = pca_rgb(projected, fit, mask=True)
    black = projected[0, :, 0] < 0
    assert black.tolist() == [False, True, False, False, False, True, False]
    assert (masked[0, black] == 0).all()
    assert np.array_equal(masked[0, ~black], rgb[0, ~black])


def test_a_pca_picture_that_cannot_be_written_ends_the_run_with_nothing_left_running(
    make_photos: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The images are recorded in order while later ones are drawn (a task per batch and
    layer): a write that fails in the second batch ends the run with its one-line error and
    exit code 1, the first batch recorded, and the tasks not yet started are cancelled, not
    drawn."""
    import concurrent.futures
    import threading

    import actviz.run.pca_pass as pca
    from actviz.errors import OutputError
    from actviz.run.loop import _render_threads

    threads = _render_threads()
    photos = make_photos(4 * threads + 4)  # batches of 2 past the failing one: 4 * threads tasks
    real, real_wait = pca._draw_pca_layer, concurrent.futures.wait
    started: list[int] = []
    lock = threading.Lock()
    raised, cancelled = threading.Event(), threading.Event()

    def failing(batch: Any, order: int, bands: Any) -> dict[int, str]:
        first = batch[0][0]
        with lock:
            started.append(first)
        if first == 2:
            raised.set()
            raise OutputError("cannot write a PCA picture here; free some space")
        if first >= 4:  # held until the run's thread has seen the failure and cancelled
            cancelled.wait(timeout=60)
        return real(batch, order, bands)

    def waiting(futures: Any, *args: Any, **kwargs: Any) -> Any:
        if raised.is_set():
            cancelled.set()
        return real_wait(futures, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "wait", waiting)
    monkeypatch.setattr(pca, "_draw_pca_layer", failing)
    out = tmp_path / "out"
    args = ["run", "resnet18", str(photos), "--weights", "none", "-l", "layer1,layer3"]
    args += ["--input-size", "64,64", "-o", str(out), "--view", "pca", "-b", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "cannot write a PCA picture here; free some space" in result.output
    assert "Traceback" not in result.output
    # Each render thread started at most one task after the failure: the rest were
    # cancelled.
    assert started.count(0) == 2 and 2 in started, started
    assert len([f for f in started if f >= 4]) <= threads, started
    assert not any(t.name.startswith("actviz-render") for t in threading.enumerate())
    assert [i["status"] for i in run_images(out)] == ["ok", "ok"]


def test_a_pca_picture_that_cannot_be_written_in_the_second_pass_cancels_its_batchs_rest(
    make_photos: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing kept, every image's PCA pictures are drawn in a second pass, a task per
    layer of its batch: a write that fails there ends the run with its one-line error and
    exit code 1, the batch's tasks not yet started are cancelled, not drawn, and no later
    batch runs through the model."""
    import concurrent.futures
    import threading

    import actviz.command.forward as forward
    import actviz.run.pca_pass as pca
    from actviz.errors import OutputError
    from actviz.run.loop import _render_threads

    threads = _render_threads()
    real, real_wait, real_call = pca._draw_pca_layer, concurrent.futures.wait, forward._call
    started: list[int] = []
    batches: list[int] = []
    lock = threading.Lock()
    raised, cancelled = threading.Event(), threading.Event()
    second = threading.Event()

    def failing(batch: Any, order: int, bands: Any) -> dict[int, str]:
        with lock:
            started.append(order)
        if order == 0:
            raised.set()
            raise OutputError("cannot write a PCA picture here; free some space")
        cancelled.wait(timeout=60)  # held until the run's thread has cancelled
        return real(batch, order, bands)

    def waiting(futures: Any, *args: Any, **kwargs: Any) -> Any:
        if raised.is_set():
            cancelled.set()
        return real_wait(futures, *args, **kwargs)

    def second_pass(self: Any, *args: Any) -> None:
        second.set()
        real_second(self, *args)

    def counted(name: str, module: Any, x: Any, first: Path) -> Any:
        if second.is_set():
            batches.append(int(x.shape[0]))
        return real_call(name, module, x, first)

    real_second = pca.PcaPass._second_pass
    monkeypatch.setattr(pca, "KEEP_BYTES", 0)
    monkeypatch.setattr(pca.PcaPass, "_second_pass", second_pass)
    monkeypatch.setattr(forward, "_call", counted)
    monkeypatch.setattr(concurrent.futures, "wait", waiting)
    monkeypatch.setattr(pca, "_draw_pca_layer", failing)
    out = tmp_path / "out"
    # Every conv: 20 layers, 20 tasks for the batch, more than the render threads.
    args = ["run", "resnet18", str(make_photos(4)), "--weights", "none", "--input-size", "64,64"]
    args += ["-o", str(out), "--view", "pca", "-b", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "cannot write a PCA picture here; free some space" in result.output
    assert "Traceback" not in result.output
    assert batches == [2], batches  # the second batch never ran again
    # Besides the failing one, each render thread started at most one task: the rest of
    # the batch's 20 were cancelled.
    assert 0 in started and len(started) <= 1 + threads, started
    assert not any(t.name.startswith("actviz-render") for t in threading.enumerate())
