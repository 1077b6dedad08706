"""What a notebook cell shows of results: cards (content, escaping, size bound, thumbnails that
decode as PNGs of the right size), pictures, reprs that never import torch for results read
from disk, and the training log's card and live view."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pytest
from PIL import Image

from actviz.cards import (
    CARD_MAX_BYTES,
    MAX_ROWS,
    LiveView,
    cam_eval_card,
    fit_size,
    run_card,
)
from actviz.models.listing import LayerInfo, LayerListing
from actviz.models.weights import WeightsInfo
from actviz.results import ImageResult, LayerResult
from actviz.run.result import ImageRecords, RunCounts, RunResult

ROOT = Path(__file__).resolve().parents[1]
IMG = re.compile(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)"')


def decoded(card_html: str) -> list[tuple[Image.Image, int, int]]:
    """Every inline thumbnail: the decoded PNG and the size the tag gives it."""
    out = []
    for b64, width, height in IMG.findall(card_html):
        data = base64.b64decode(b64)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        out.append((Image.open(io.BytesIO(data)), int(width), int(height)))
    return out


def noise_png(path: Path, size: tuple[int, int], seed: int = 0) -> Path:
    """A picture that compresses badly (the worst case for a card's size)."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def layer(key: str, file: str | None) -> LayerResult:
    return LayerResult(key, key, "Conv2d", 1, (1, 8, 16, 16), -1.0, 2.0, 0.5, 8, 8, file)


def synthetic_run(
    out: Path, images: int, layers: int, *, nan_layer: int | None = None
) -> tuple[RunResult, list[int]]:
    """A RunResult of ``images`` images and ``layers`` layers whose first image's grids are
    noise pictures on disk; the list counts the images read back from the "ledger"."""
    names = [f"block{i}.conv" for i in range(layers)]
    for i in range(min(layers, 8)):
        noise_png(out / "img0" / f"{i:03d}_{names[i]}.png", (900, 700), seed=i)
    noise_png(out / "img0" / "input.png", (224, 224), seed=99)
    reads: list[int] = []

    def load(stubs: Any) -> Any:
        for stub in stubs:
            reads.append(1)
            stub = ImageResult(stub.path, stub.out_dir, stub.status, thumbnail="img0/input.png")
            stub.layers = [
                layer(name, f"img0/{i:03d}_{name}.png" if i < 8 else None)
                for i, name in enumerate(names)
            ]
            yield stub

    stubs = [ImageResult(Path(f"p/{i}.jpg"), PurePosixPath(f"img{i}")) for i in range(images)]
    stubs[-1].status = "failed" if images > 3 else "ok"
    run_layers = [
        {
            "name": n,
            "channels": 8,
            "mean": 0.1,
            "std": 1.0,
            "min": -1.0,
            "max": 2.0,
            "dead_frac": 0.0,
            "flagged": {"nan": 3 if nan_layer is not None and i >= nan_layer else 0},
        }
        for i, n in enumerate(names)
    ]
    flags: dict[str, Any] = {"images": {"nan": 3} if nan_layer is not None else {}}
    if nan_layer is not None:  # format 2: the worst images per kind, most severe first
        later, first = names[nan_layer + 2], names[nan_layer]
        flags["worst"] = {
            "nan": [
                {"image": "img7", "layer": later, "message": f"NaN in {later}", "severity": 0.9},
                {"image": "img9", "layer": first, "message": f"NaN in {first}", "severity": 0.1},
            ]
        }
    stats = {
        "format": 2,
        "run": {"layers": run_layers},
        "flags": flags,
        "images": {"count": images},
    }
    result = RunResult(
        model="resnet18",
        weights=WeightsInfo("auto", "random", reason="no network"),
        device="cpu",
        selector="conv",
        layers=names,
        out=out,
        images=ImageRecords(stubs, load),
        skipped=[],
        seconds=12.5,
        manifest=out / "manifest.json",
        stats=stats,
        report=out / "index.html",
        weights_warning="pretrained weights unavailable (no network): random weights",
        counts=RunCounts(grids=images * layers, files=images * layers + images),
    )
    return result, reads


def test_a_20000_image_run_card_stays_small_and_reads_one_image(tmp_path: Path) -> None:
    result, reads = synthetic_run(tmp_path, images=20_000, layers=500, nan_layer=40)
    card = result._repr_html_()
    assert len(card.encode()) < CARD_MAX_BYTES
    assert sum(reads) == 1  # one image read back from the ledger, not 20,000
    text = html.unescape(card)
    assert "20,000 (1 failed)" in text
    assert "block0.conv" in text and f"block{MAX_ROWS - 1}.conv" in text
    assert f"block{MAX_ROWS}.conv<" not in text  # rows past the cap are counted, not shown
    assert f"{500 - MAX_ROWS} more layers" in text
    assert "pretrained weights unavailable (no network)" in text
    # The first NaN came from the earliest flagged layer in depth order, not the most severe.
    assert "first NaN from layer block40.conv (image img9)" in text
    assert text.count("<tr>") <= 2 * MAX_ROWS + 2
    assert "more pictures in the folder" in text
    assert repr(result).startswith("RunResult(model='resnet18', weights='random (no network)'")
    assert "images=20000 (1 failed)" in repr(result) and len(repr(result)) < 400


def test_card_thumbnails_decode_at_the_size_they_claim(tmp_path: Path) -> None:
    result, _ = synthetic_run(tmp_path, images=3, layers=3)
    thumbs = decoded(result._repr_html_())
    assert len(thumbs) == 4  # the input, then each grid
    input_thumb, *grids = thumbs
    assert input_thumb[0].size == (180, 180) == input_thumb[1:]
    for i, (image, width, height) in enumerate(grids):
        assert image.size == (width, height) == fit_size(900, 700) == (231, 180)
        source = Image.open(tmp_path / "img0" / f"{i:03d}_block{i}.conv.png")
        expected = np.asarray(source.resize(image.size, Image.Resampling.LANCZOS), np.float64)
        shown = np.asarray(image.convert("RGB"), np.float64)
        assert abs(shown.mean() - expected.mean()) < 2  # the same picture, made smaller
        assert np.abs(shown - expected).mean() < 12  # 256 colours: close, not exact


def test_card_escapes_what_it_shows(tmp_path: Path) -> None:
    result, _ = synthetic_run(tmp_path, images=1, layers=1)
    result.layers = ["<script>alert(1)</script>"]
    result.warnings = ['a "quoted" <b>warning</b>']
    result.stats = None
    card = result._repr_html_()
    assert "<script>" not in card and "<b>warning" not in card
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in card


def test_listing_card_names_selected_layers() -> None:
    layers = [
        LayerInfo(f"layer{i}.conv", "Conv2d", (1, 8, 4, 4), 1, 72, i % 2 == 0) for i in range(40)
    ]
    listing = LayerListing("tiny", (1, 3, 32, 32), layers, "conv", 20)
    text = html.unescape(listing._repr_html_())
    assert "20 selected by 'conv'" in text and "layer0.conv" in text and "layer1.conv" not in text
    assert f"{20 - MAX_ROWS} more layers" in text
    assert (
        repr(listing) == "LayerListing(model='tiny', layers=40, selected=20, input=(1, 3, 32, 32))"
    )


def test_grid_image_shows_itself_as_png() -> None:
    from actviz.render import render_grid

    grid = render_grid(
        np.random.default_rng(0).normal(size=(4, 8, 8)).astype(np.float32), title="x"
    )
    png = grid._repr_png_()
    shown = Image.open(io.BytesIO(png))
    assert shown.size == grid.size
    assert np.array_equal(np.asarray(shown.convert("RGB")), grid.to_rgb())


def test_pca_view_shows_itself_as_png() -> None:
    from actviz.run.pca import pca_view

    maps = np.random.default_rng(0).normal(size=(2, 6, 5, 7)).astype(np.float32)
    view = pca_view(maps)
    shown = Image.open(io.BytesIO(view._repr_png_()))
    assert shown.size == (7 + 4 + 7, 5)  # two images side by side, a 4-pixel gap
    assert np.array_equal(np.asarray(shown)[:, :7], view.images[0])
    assert repr(view).startswith("PcaView(images=2, size=[(5, 7)]")


def write_log(path: Path) -> Path:
    """A training log as actviz.watch writes it: a start, three steps, a NaN's origin."""
    records = [
        {"kind": "start", "model": "Net", "optimizer": "SGD", "every": 1, "layers": ["fc1"]},
        *[
            {
                "kind": "step",
                "step": s,
                "loss": 2.0 - s / 2,
                "grad_norm": 1.5,
                "layers": {
                    "fc1": {
                        "mean": 0.1 * s,
                        "std": 1.0,
                        "min": -2.0,
                        "max": 3.0,
                        "zero_frac": 0.25,
                        "grad_norm": 0.5,
                    }
                },
            }
            for s in range(3)
        ],
        {
            "kind": "nonfinite",
            "step": 2,
            "phase": "forward",
            "module": "fc2",
            "module_type": "Linear",
            "value": "NaN",
        },
        {
            "kind": "step",
            "step": 3,
            "loss": None,
            "layers": {"fc1": {"mean": None}},
            "flags": [{"kind": "nan", "target": "fc2", "step": 3, "message": "NaN in fc2"}],
        },
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "watch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    return path


def test_training_log_card_names_the_origin_flags_and_layers(tmp_path: Path) -> None:
    from actviz import read_log

    log = read_log(write_log(tmp_path / "run"))
    text = html.unescape(log._repr_html_())
    assert "first NaN at step 2: from fc2 (Linear) in the forward pass" in text
    assert "step 3: nan fc2: NaN in fc2" in text
    assert ">fc1<" in text and "running" in text  # no end record yet
    assert "<polyline" in text  # the loss over the recorded steps
    assert repr(log).startswith("TrainingLog(model='Net', status='running', latest_step=3")


def test_reprs_of_results_from_disk_never_import_torch(tmp_path: Path) -> None:
    write_log(tmp_path / "log")
    synthetic_run(tmp_path / "run", images=2, layers=2)  # writes the pictures
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import actviz
        from tests.test_cards import synthetic_run, LayerInfo, LayerListing
        log = actviz.read_log({str(tmp_path / "log")!r})
        result, _ = synthetic_run(Path({str(tmp_path / "run")!r}), images=2, layers=2)
        listing = LayerListing("m", (1, 3, 8, 8), [LayerInfo("a", "Conv2d", None, 1, 0, True)],
                               None, 1)
        shown = [repr(log), log._repr_html_(), repr(result), result._repr_html_(),
                 repr(listing), listing._repr_html_()]
        assert all(shown) and "<img" in shown[3]
        print("torch" in sys.modules, "numpy" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


class FakeHandle:
    def __init__(self) -> None:
        self.shown: list[str] = []

    def update(self, obj: Any) -> None:
        self.shown.append(obj.data)


def test_watch_shows_itself_and_its_live_view_redraws_every_n_steps(tmp_path: Path) -> None:
    import torch

    import actviz

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with actviz.watch(model, opt, every=5, out=tmp_path / "w") as w:
        view = w.live(every=10)
        assert isinstance(view, LiveView)
        view._handle = FakeHandle()  # what IPython's display gives in a kernel
        for _ in range(25):
            loss = model(torch.randn(3, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss=loss)
        during = w._repr_html_()
    shown = view._handle.shown
    assert len(shown) == 3  # steps 10 and 20, and once at the end of the block
    assert "latest recorded step</td>" in shown[0] and ">5<" in shown[0]
    assert "finished, 25 steps" in html.unescape(shown[-1]) and ">20<" in shown[-1]
    assert ">0<" in during and "running" in during  # the same card, from the object itself
    assert re.search(r">0\.[0-9]+<", during)  # numbers, in the per-layer table
    assert "Watch(model='Sequential'" in repr(w)


def test_live_view_outside_a_notebook_draws_nothing(tmp_path: Path) -> None:
    view = LiveView(write_log(tmp_path) / "watch.jsonl", every=1)
    view.tick(1)
    view.refresh()
    assert view.draws == 0
    assert "fc2" in view.html()
    with pytest.raises(ValueError, match="every"):
        LiveView(tmp_path, every=0)


def test_run_card_of_a_real_run(tmp_path: Path, make_photos: Any) -> None:
    import torch

    import actviz

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 6, 3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(6, 3),
    )
    photos = make_photos(3)
    result = actviz.run(
        model, photos, out=tmp_path / "out", layers="0,2", report=True, input_size=(40, 40)
    )
    card = result._repr_html_()
    text = html.unescape(card)
    assert ">0<" in text and ">2<" in text and "index.html" in text
    thumbs = decoded(card)
    first = result.images[0]
    grids = [(tmp_path / "out" / lay.file) for lay in first.layers if lay.file]
    assert len(thumbs) == 1 + len(grids)
    for (image, w, h), path in zip(thumbs[1:], grids, strict=True):
        assert (w, h) == fit_size(*Image.open(path).size) == image.size
    assert run_card(result).flags == []


def test_diff_card_names_the_first_divergent_layer_and_both_weights(tmp_path: Path) -> None:
    from actviz.diff.result import DiffPicture, DiffResult, LayerDiff, ModelSide

    noise_png(tmp_path / "pics" / "a.png", (400, 100))
    layers = [
        LayerDiff(f"l{i}", f"l{i}", "Conv2d", 1 - i / 40, True, 1 - i / 80, i / 10, (4,), (4,))
        for i in range(30)
    ]
    result = DiffResult(
        mode="models",
        a=ModelSide("resnet18", WeightsInfo("a.pt", "checkpoint", name="a.pt")),
        b=ModelSide("resnet18", WeightsInfo("none", "random")),
        selector="conv",
        metric="cka",
        threshold=0.9,
        layers=layers,
        first_divergent="l5",
        images=[],
        out=tmp_path,
        record=tmp_path / "diff.json",
        device="cpu",
        seconds=3.0,
        pictures=[DiffPicture("img0", "l3", "pics/a.png", (0, 1), 4, {}, 1.0)],
        first_changed="l1",
    )
    text = html.unescape(result._repr_html_())
    assert "first divergent layer (cka < 0.9): l5" in text and "first changed layer: l1" in text
    assert "checkpoint a.pt" in text and "random weights" in text  # B's weights are random
    assert f"{30 - MAX_ROWS} more layers" in text
    ((thumb, w, h),) = decoded(result._repr_html_())
    assert thumb.size == (w, h) == fit_size(400, 100)
    assert repr(result) == (
        f"DiffResult(a='resnet18 a.pt', b='resnet18 (random)', layers=30, "
        f"first_divergent='l5', out={str(tmp_path)!r})"
    )


def test_optimize_card_shows_each_layers_sheet(tmp_path: Path) -> None:
    from actviz.optimize import ChannelImage, LayerImages, OptimizeResult

    noise_png(tmp_path / "00_fc.png", (300, 150))
    layers = [
        LayerImages(
            "fc",
            0,
            sheet="00_fc.png",
            channels=[ChannelImage(c, f"c{c}.png", 1.5 + c, [0.1, 1.5 + c]) for c in range(3)],
        ),
        LayerImages("logits", 1, unit="class", sheet=None),
    ]
    result = OptimizeResult(
        model="tiny",
        weights=WeightsInfo("auto", "module", name="Tiny"),
        device="cpu",
        out=tmp_path,
        json=tmp_path / "optimize.json",
        report=None,
        layers=layers,
        steps=64,
        size=96,
        seconds=2.0,
        warnings=[],
        complete=False,
        document={},
    )
    card = result._repr_html_()
    text = html.unescape(card)
    assert ">fc<" in text and ">logits<" in text and ">3.5<" in text  # the best objective
    assert "stopped early" in text and "3 in 2 layers" in text
    assert [img.size for img, _, _ in decoded(card)] == [fit_size(300, 150)]
    assert "channels=3, steps=64, complete=False" in repr(result)


def test_cam_eval_card_scores_every_map_and_flags_a_failed_sanity_check(tmp_path: Path) -> None:
    from actviz.cam_eval import CamEvalResult
    from actviz.cards import RANDOM_WARNING

    def ci(mean: float) -> dict[str, float]:
        return {"mean": mean, "low": mean - 0.01, "high": mean + 0.01}

    def entry(deletion: float, insertion: float, spearman: float | None, **more: Any) -> Any:
        stages = [] if spearman is None else [{"block": "fc", "spearman": ci(spearman)}]
        metrics = [("deletion_auc", deletion), ("insertion_auc", insertion)]
        metrics += [("drop_pct", 41.5), ("increase", 0.25)]
        return {
            "metrics": {name: ci(value) for name, value in metrics},
            "sanity": {"stages": stages, "flagged": spearman is not None and spearman > 0.9},
            **more,
        }

    verdict = {"overall": "yes"}
    summary = {
        "gradcam": entry(0.125, 0.5, 0.25, beats={"random": verdict, "sobel": {"overall": "tie"}}),
        "eigencam": entry(0.25, 0.375, 0.96, beats={"random": {"overall": "no"}}),
        "random": entry(0.5, 0.5, None, baseline=True),
    }
    noise_png(tmp_path / "curves.png", (320, 160))
    result = CamEvalResult(
        out=tmp_path,
        record=tmp_path / "cam-eval.json",
        layer="layer4",
        methods=["gradcam", "eigencam"],
        summary=summary,
        images=[{"status": "ok"}, {"status": "ok"}, {"status": "failed", "error": "x"}],
        random_weights=True,
        seconds=2.5,
        device="cpu",
        chart=tmp_path / "curves.png",
        report=tmp_path / "cam-eval.html",
        model="resnet18",
    )
    card = cam_eval_card(result)
    assert card.warnings[0] == RANDOM_WARNING
    assert card.flags == [
        "eigencam: sanity check failed: its maps barely change as the weights are re-initialised"
    ]
    assert card.table is not None and [row[0] for row in card.table.rows] == [
        "gradcam",
        "eigencam",
        "(random)",
    ]
    gradcam, eigencam, baseline = card.table.rows
    assert gradcam == ["gradcam", "0.125", "0.5", "41.5", "0.25", "random:yes sobel:tie", "0.25"]
    assert eigencam[-2:] == ["random:no", "0.96 UNCHANGED"] and baseline[-2:] == ["-", "-"]
    assert ("images", "2 scored (1 failed)") in card.facts and ("layer", "layer4") in card.facts
    html_card = result._repr_html_()
    assert [(w, h) for _, w, h in decoded(html_card)] == [fit_size(320, 160)]
    text = html.unescape(html_card)
    assert text.index(RANDOM_WARNING) < text.index("gradcam")
    assert [label for label, _ in card.links] == ["report", "cam-eval.json", "folder"]
    assert repr(result) == (
        f"CamEvalResult(model='resnet18', layer='layer4', methods=['gradcam', 'eigencam'], "
        f"images=2, out={str(tmp_path)!r})"
    )


def test_top_images_card_of_a_real_run(tmp_path: Path, make_photos: Any) -> None:
    import torch

    import actviz

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten())
    result = actviz.top_images(
        model, [make_photos(3)], layers="1", k=2, out=tmp_path / "t", input_size=(32, 32)
    )
    card = result._repr_html_()
    text = html.unescape(card)
    assert ">1<" in text and "top 2 by max, 1 layer" in text and "top-images.json" in text
    overview = Image.open(tmp_path / "t" / result.layers[0].overview)
    assert [(w, h) for _, w, h in decoded(card)] == [fit_size(*overview.size)]
    assert repr(result).startswith("TopImagesResult(model='Sequential', images=3, k=2, layers=1")


def test_optimized_images_show_side_by_side() -> None:
    from actviz.optimize import BatchResult

    images = np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), dtype=np.uint8)
    batch = BatchResult(images, np.zeros((2, 3), np.float32), np.zeros(3, np.float32), (3, 8))
    shown = np.asarray(Image.open(io.BytesIO(batch._repr_png_())))
    assert shown.shape == (16, 3 * 16 + 2 * 4, 3)
    assert np.array_equal(shown[:, 20:36], images[1]) and (shown[:, 16:20] == 255).all()


def test_links_are_relative_under_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actviz.cards.card import href

    monkeypatch.chdir(tmp_path)
    assert href(tmp_path / "out" / "index.html") == "out/index.html"
    assert href("out/x y.png") == "out/x y.png"
    assert href("/elsewhere/index.html") == "file:///elsewhere/index.html"
    result, _ = synthetic_run(tmp_path / "run", images=1, layers=1)
    assert 'href="run/index.html"' in result._repr_html_()
