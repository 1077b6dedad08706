"""Detectors: fed through their own transform, FPN levels recorded as the library computes
them, padding cropped, detections recorded and drawn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from actviz.api import read_images
from actviz.cli import app
from actviz.hooks import ActivationRecorder
from actviz.models import default_selector
from actviz.models.families import DETECTION, lower_score_threshold
from actviz.models.registry import load_model
from actviz.render.detection import Detection, detection_colour, detection_picture
from tests.conftest import make_image

runner = CliRunner()


@pytest.fixture(scope="module")
def detector() -> object:
    # min_size 128, max_size 160: the model resizes a 200x100 picture to 160x80 and pads
    # it to 160x96.
    return load_model(
        "fasterrcnn_resnet50_fpn", weights="none", device="cpu", input_size=(128, 160)
    )


def test_an_fpn_level_equals_the_backbone_on_the_models_own_transform(
    detector: object, tmp_path: Path
) -> None:
    loaded = detector
    assert loaded.family is DETECTION and not loaded.classifier  # type: ignore[attr-defined]
    model = loaded.module  # type: ignore[attr-defined]
    assert model.transform.min_size == (128,) and model.transform.max_size == 160
    assert loaded.categories[1] == "person"  # type: ignore[attr-defined]
    x = loaded.preprocess(  # type: ignore[attr-defined]
        Image.open(make_image(tmp_path / "a.png", (200, 100)))
    ).unsqueeze(0)
    # The image as decoded, in 0..1: the model's own transform does all the resizing.
    assert x.shape == (1, 3, 100, 200) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    with (
        ActivationRecorder(model, ["backbone.fpn", "backbone.body.layer2"], per_image=True) as acts,
        torch.inference_mode(),
    ):
        out = DETECTION.call(model, x)
        images, _ = model.transform(list(x))
        expected = model.backbone(images.tensors)
    assert isinstance(out, list) and set(out[0]) == {"boxes", "labels", "scores"}
    assert set(acts) >= {f"backbone.fpn[{k}]" for k in ("0", "1", "2", "3", "pool")}
    # The model resized the picture to 160x80 and padded it to 160x96: every recorder crops
    # each level to the rows that see the image, ceil(80 / stride).
    assert images.image_sizes == [(80, 160)] and images.tensors.shape[-2:] == (96, 160)
    for level, tensor in expected.items():
        kept = tensor[..., : -(-80 * tensor.shape[-2] // 96), :]
        torch.testing.assert_close(acts[f"backbone.fpn[{level}]"], kept)
    assert acts["backbone.fpn[0]"].shape[-2:] == (20, 40)
    # The selector a user gets by default: stages, every FPN level, objectness per level.
    assert default_selector(model) == (
        r"re:^backbone\.body\.layer\d+$,backbone.fpn,rpn.head.cls_logits"
    )


@pytest.mark.slow
def test_a_run_crops_the_padding_and_records_the_detections(tmp_path: Path) -> None:
    # 200x100 as decoded, 160x80 by the model's own transform (longer side to max_size),
    # padded to 160x96.
    image = make_image(tmp_path / "wide.png", (200, 100))
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_resnet50_fpn", str(image), "--weights", "none"]
    argv += ["--input-size", "128,160", "--score-threshold", "0", "--save-tensors"]
    result = runner.invoke(app, [*argv, "-l", "backbone.fpn", "-o", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = list(read_images(out))
    layers = {layer["name"]: layer for layer in record["layers"]}
    # Level 0 (stride 4): 24 rows of which 20 see the 80-pixel-high image.
    assert layers["backbone.fpn[0]"]["shape"] == [1, 256, 20, 40]
    assert "padded its 160x80 input to 160x96" in layers["backbone.fpn[0]"]["note"]
    saved = np.load(out / "wide" / "00_backbone.fpn_0.npy")
    loaded = load_model(
        "fasterrcnn_resnet50_fpn", weights="none", device="cpu", input_size=(128, 160)
    )
    x = loaded.preprocess(Image.open(image)).unsqueeze(0)
    with torch.inference_mode():
        images, _ = loaded.module.transform(list(x))
        assert images.tensors.shape[-2:] == (96, 160) and images.image_sizes == [(80, 160)]
        level = loaded.module.backbone(images.tensors)["0"][0, :, :20, :40]
    np.testing.assert_allclose(saved, level.numpy(), rtol=1e-4, atol=1e-5)
    # The coarsest levels have no padding row to crop: no note.
    assert layers["backbone.fpn[pool]"]["note"] is None

    detections = record["detections"]
    assert len(detections) == 100 and record["detections_file"] == "wide/detections.png"
    scores = [d["score"] for d in detections]
    assert scores == sorted(scores, reverse=True)
    for d in detections:  # COCO's unused ids (an untrained head predicts them) say theirs
        name = loaded.categories[d["label"]]
        assert d["name"] == (f"N/A (class {d['label']})" if name == "N/A" else name)
    picture = np.asarray(Image.open(out / "wide" / "detections.png").convert("RGB"))
    # Under the header, the image at the 160x80 the model saw it at; the boxes, in the
    # 200x100 image's pixels, drawn scaled by 0.8; the best one outlined in its colour (later
    # boxes may cover part of it).
    assert max(d["box"][2] for d in detections) > 160  # the image's pixels, not the view's
    below = picture[picture.shape[0] - 80 :].astype(int)
    x1, y1, x2, y2 = (
        min(max(int(round(v * 0.8)), 0), bound)
        for v, bound in zip(detections[0]["box"], (159, 79, 159, 79), strict=True)
    )
    # Its four edges, a pixel either side (Pillow rounds a fractional edge either way).
    rows = [r for r in (y1 - 1, y1, y1 + 1, y2 - 1, y2, y2 + 1) if 0 <= r < 80]
    cols = [c for c in (x1 - 1, x1, x1 + 1, x2 - 1, x2, x2 + 1) if 0 <= c < 160]
    outline = np.concatenate(
        [below[r, x1 : x2 + 1] for r in rows] + [below[y1 : y2 + 1, c] for c in cols]
    )
    matches = np.abs(outline - np.asarray(detection_colour(0))).sum(axis=-1) == 0
    assert matches.sum() >= 10
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model_info"]["family"] == "detection"
    assert "GeneralizedRCNNTransform" in manifest["model_info"]["preprocessing"]["from"]


@pytest.mark.slow
def test_a_runs_maps_and_boxes_are_torchvisions_on_every_size_and_aspect(tmp_path: Path) -> None:
    # mobilenet_v3_large_320_fpn resizes to min_size 320, max_size 640: a 4:3 photo, a 3:1
    # panorama (capped by max_size), a portrait and a small image (enlarged 5x).
    sizes = [(640, 480), (1200, 400), (300, 500), (64, 48)]
    paths = [make_image(tmp_path / f"{w}x{h}.png", (w, h), seed=w) for w, h in sizes]
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_mobilenet_v3_large_320_fpn", *map(str, paths), "-w", "none"]
    argv += ["--score-threshold", "0", "--save-tensors", "-l", "backbone.fpn", "--no-report"]
    result = runner.invoke(app, [*argv, "-o", str(out)])
    assert result.exit_code == 0, result.output
    records = {Path(r["path"]).stem: r for r in read_images(out)}
    loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn", weights="none", device="cpu")
    model = loaded.module
    lower_score_threshold(model, 0.0)
    for path, (width, height) in zip(paths, sizes, strict=True):
        # torchvision's own pipeline on the decoded image: to_tensor, then the model.
        image = torch.from_numpy(np.array(Image.open(path).convert("RGB"))).permute(2, 0, 1)
        image = image.float() / 255
        with torch.inference_mode():
            images, _ = model.transform([image])
            levels = model.backbone(images.tensors)
            (expected,) = model([image])
        (h, w), (ph, pw) = images.image_sizes[0], images.tensors.shape[-2:]
        for level, tensor in levels.items():
            saved = np.load(next((out / path.stem).glob(f"*_backbone.fpn_{level}.npy")))
            rows, cols = -(-h * tensor.shape[-2] // ph), -(-w * tensor.shape[-1] // pw)
            expected_level = tensor[0, :, :rows, :cols].numpy()
            np.testing.assert_allclose(saved, expected_level, rtol=1e-5, atol=1e-6)
        # The boxes are the model's own, in the image's pixels (rounded to 0.01).
        order = expected["scores"].argsort(descending=True)
        boxes = np.array([d["box"] for d in records[path.stem]["detections"]])
        assert boxes.shape == (len(order), 4) and len(order) > 0
        np.testing.assert_allclose(boxes, expected["boxes"][order].numpy(), atol=0.006)
        assert boxes[:, 2].max() <= width and boxes[:, 3].max() <= height
        assert boxes[:, 2].max() > 0.9 * width  # spread over the whole image, not a resize
        fit = loaded.preprocess.fit((width, height))
        assert fit.resized == (w, h) and fit.seen == 1.0
    # The pictures show the image at the size the model saw it: the panorama at 640 x 213.
    assert Image.open(out / "1200x400" / "detections.png").width == 640


def test_no_detection_above_the_threshold_is_said_and_the_maps_are_drawn(tmp_path: Path) -> None:
    image = make_image(tmp_path / "a.png", (96, 64))
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_mobilenet_v3_large_320_fpn", str(image), "--weights", "none"]
    result = runner.invoke(app, [*argv, "--score-threshold", "0.99", "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    assert "no detection scored 0.99 or more in 1 image(s)" in result.stderr
    assert "--score-threshold lowers the cut" in result.stderr
    warnings = json.loads((out / "manifest.json").read_text())["warnings"]
    assert any(w.startswith("no detection scored 0.99") for w in warnings)  # listed there too
    (record,) = list(read_images(out))
    assert record["detections"] == []
    grids = sorted(p.name for p in (out / "a").glob("*backbone.fpn*.png"))
    assert grids == ["17_backbone.fpn_0.png", "18_backbone.fpn_1.png", "19_backbone.fpn_pool.png"]
    # A class score to explain is one detection's: a class target is a usage error.
    cam = runner.invoke(app, [*argv, "--grads", "-o", str(tmp_path / "g")])
    assert cam.exit_code == 2 and "detector" in cam.stderr


def test_the_detection_picture_draws_boxes_masks_and_keypoints() -> None:
    view = Image.new("RGB", (120, 80), (0, 0, 0))
    mask = np.zeros((80, 120), np.float32)
    mask[40:60, 20:50] = 0.9  # below the label, which sits inside the box at the top edge
    keypoints = np.array([[80, 50, 1], [100, 50, 1], [75, 70, 0]], np.float32)
    found = [
        Detection((10, 10, 60, 70), "cat 0.90", mask=mask),
        Detection((70, 5, 110, 75), "dog 0.40", keypoints=keypoints),
    ]
    picture = np.asarray(detection_picture(view, found, title="t", skeleton=[(0, 1), (1, 2)]))
    body = picture[picture.shape[0] - 80 :].astype(int)
    first, second = np.asarray(detection_colour(0)), np.asarray(detection_colour(1))
    assert (body[50, 10] == first).all()  # the left edge of the first box
    # The mask is blended in its box's colour; the black picture elsewhere stays black.
    assert np.abs(body[50, 35] / 0.45 - first).max() < 3
    assert (body[35, 35] == 0).all() and (body[78, 2] == 0).all()
    # The visible keypoints joined by a line; the invisible one not drawn.
    assert np.abs(body[50, 90] - second).sum() < 10
    assert (body[70, 75] == 0).all()


def test_a_label_at_the_right_edge_is_moved_left_whole() -> None:
    view = Image.new("RGB", (120, 80), (0, 0, 0))
    found = [Detection((100, 30, 119, 60), "a long label 0.90")]
    picture = np.asarray(detection_picture(view, found)).astype(int)
    colour = np.asarray(detection_colour(0))
    row = picture[30 - 3]  # the label's band, above the box
    filled = np.flatnonzero((row == colour).all(axis=1) | (row == 255).all(axis=1))
    # Its band ends at the picture's edge and starts left of the box: the text is whole.
    assert filled.max() == 119 and filled.min() < 100 - 40


@pytest.mark.slow
def test_a_labels_name_says_its_id_where_the_list_has_none() -> None:
    from actviz.run.families.detection.probe import found_in

    output = {
        "scores": torch.tensor([0.9, 0.8, 0.7, 0.6]),
        "labels": torch.tensor([1, 12, 99, 0]),
        "boxes": torch.zeros(4, 4),
    }
    categories = [
        "__background__",
        "person",
        *["N/A" if i == 12 else f"c{i}" for i in range(2, 91)],
    ]
    assert found_in(output, 0.5, categories).names == [
        "person",
        "N/A (class 12)",  # COCO's unused id, which an untrained head predicts too
        "class 99",  # past the list
        "__background__",
    ]
    assert found_in(output, 0.75, None).names == ["class 1", "class 12"]


def test_detection_cams_eigen_over_the_fpn_levels_and_grad_cam_of_one_detection(
    tmp_path: Path,
) -> None:
    from torch.nn import functional as F

    image = make_image(tmp_path / "wide.png", (200, 100))
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_resnet50_fpn", str(image), "--weights", "none", "--cam"]
    argv += ["--input-size", "128,160", "--score-threshold", "0", "--detection", "2"]
    result = runner.invoke(app, [*argv, "-l", "backbone.fpn", "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (record,) = list(read_images(out))
    assert record["detection_cam_file"] == "wide/detection_cam.png"
    # The count of files written names the detector's pictures too.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"]["all"] == len(list((out / "wide").iterdir()))
    picture = np.asarray(Image.open(out / "wide" / "detection_cam.png").convert("RGB"))
    # Three panels of the image at the 160x80 the model saw it at (input, EigenCAM,
    # Grad-CAM) under the header.
    assert picture.shape[1] == 3 * 160 + 2 * 4 and picture.shape[0] > 80
    eigen_panel = picture[-80:, 164:324].astype(int)
    grad_panel = picture[-80:, 328:488].astype(int)
    assert np.abs(eigen_panel - grad_panel).mean() > 5  # two different maps
    # The second detection, which Grad-CAM explains, is outlined in its colour.
    second = np.asarray(detection_colour(1))
    assert (np.abs(grad_panel - second).sum(axis=-1) == 0).sum() > 20

    # EigenCAM: every FPN level cropped, resized to level 0 and side by side, projected on
    # the first principal component as pytorch-grad-cam computes it (up to its sign).
    from pytorch_grad_cam.utils.svd_on_activations import get_2d_projection

    from actviz.hooks import Capture
    from actviz.run.families.detection.cam import eigen_maps

    loaded = load_model(
        "fasterrcnn_resnet50_fpn", weights="none", device="cpu", input_size=(128, 160)
    )
    x = loaded.preprocess(Image.open(image)).unsqueeze(0)
    with torch.inference_mode():
        images, _ = loaded.module.transform(list(x))
        levels = loaded.module.backbone(images.tensors)
    kept = {k: v[..., : -(-80 * v.shape[-2] // 96), :] for k, v in levels.items()}
    captures = [
        Capture(f"backbone.fpn[{k}]", "backbone.fpn", "FeaturePyramidNetwork", 1, tuple(v.shape), v)
        for k, v in kept.items()
    ]
    maps, source = eigen_maps(captures)  # type: ignore[misc]
    assert source == "backbone.fpn, 5 levels" and maps.shape == (1, 20, 40)
    side = torch.cat(
        [F.interpolate(v.abs(), size=(20, 40), mode="bilinear") for v in kept.values()], dim=1
    )
    projection = get_2d_projection(side.numpy())[0]
    reference = np.maximum(projection * np.sign(projection[np.abs(projection).argmax()]), 0)
    np.testing.assert_allclose(maps[0].numpy(), reference / reference.max(), atol=1e-4)


@pytest.mark.slow
def test_the_mask_head_of_each_detection_is_its_row_of_the_mask_predictor(tmp_path: Path) -> None:
    from actviz.run.families.detection.probe import DetectionProbe, found_in, with_heads

    loaded = load_model("maskrcnn_resnet50_fpn", weights="none", device="cpu", input_size=(96, 128))
    model = loaded.module
    x = torch.stack(
        [
            loaded.preprocess(Image.open(make_image(tmp_path / f"{i}.png", (128, 96), seed=i)))
            for i in range(2)
        ]
    )
    plain: list[torch.Tensor] = []
    handle = model.roi_heads.mask_predictor.register_forward_hook(
        lambda _m, _i, out: plain.append(out.detach().clone())
    )
    with DetectionProbe(model) as probe, torch.inference_mode():
        outputs = DETECTION.call(model, x)
        handle.remove()
        probe.pool_boxes()
    found = with_heads([found_in(o, 0.0, loaded.categories) for o in outputs], outputs, probe)
    (logits,) = plain
    n = len(logits)
    assert found[0].head_shapes == {
        "box features": [len(outputs[0]["boxes"]), 1024],
        "mask logits": [len(outputs[0]["boxes"]), 91, 28, 28],
    }
    assert found[0].heads and found[1].heads  # a threshold of 0 keeps every detection
    assert n == sum(len(o["boxes"]) for o in outputs)
    start = len(outputs[0]["boxes"])  # the second image's rows follow the first's
    for image, offset in ((0, 0), (1, start)):
        f = found[image]
        assert len(f.heads) == min(4, len(f.scores))
        for rank, panels in enumerate(f.heads):
            (_box, features), (name, heat) = panels  # the box head's features first
            row = offset + f.indices[rank]
            assert name == "mask logits" and features.shape == (32, 32)
            np.testing.assert_array_equal(heat, logits[row, f.labels[rank]].numpy())


def test_grad_cam_of_a_detection_takes_the_gradient_of_its_score(tmp_path: Path) -> None:
    from torch.nn import functional as F

    from actviz.run.families.detection.cam import grad_cam_maps
    from actviz.run.families.detection.probe import DetectionProbe, found_in

    loaded = load_model(
        "fasterrcnn_mobilenet_v3_large_320_fpn", weights="none", device="cpu", input_size=(128, 160)
    )
    model = loaded.module
    assert lower_score_threshold(model, 0.0) == 0.05  # the R-CNNs' own cut, now none
    x = loaded.preprocess(Image.open(make_image(tmp_path / "a.png", (160, 100)))).unsqueeze(0)
    with DetectionProbe(model) as probe, torch.inference_mode():
        outputs = DETECTION.call(model, x)
    found = [found_in(o, 0.0, loaded.categories) for o in outputs]
    assert found[0].scores
    (heat,) = grad_cam_maps(model, DETECTION.call, x, found, 0, probe)

    # The same by hand: the FPN's levels from a plain hook, autograd of the top score.
    levels: dict[str, torch.Tensor] = {}
    handle = model.backbone.fpn.register_forward_hook(lambda _m, _i, out: levels.update(out))
    (output,) = model(list(x))
    handle.remove()
    assert float(output["scores"][0]) == pytest.approx(found[0].scores[0], rel=1e-5)
    grads = torch.autograd.grad(output["scores"][0], list(levels.values()), allow_unused=True)
    # The box head pools from levels 0 and 1 only ('pool' feeds the proposals, which carry
    # no gradient): the levels the score does not depend on are left out.
    used = [(a, g) for a, g in zip(levels.values(), grads, strict=True) if g is not None]
    assert len(used) == 2
    size = tuple(levels["0"].shape[-2:])
    acts = torch.cat([F.interpolate(a.detach(), size=size, mode="bilinear") for a, _ in used], 1)
    grad = torch.cat([F.interpolate(g, size=size, mode="bilinear") for _, g in used], 1)
    cam = torch.relu((grad.mean(dim=(2, 3), keepdim=True) * acts).sum(1))[0]
    # 160x100 after the model's resize, padded to 160x128: the rows that see the image kept.
    assert probe.padded == (128, 160) and probe.image_sizes == [(100, 160)]
    cam = cam[: -(-100 * size[0] // 128)]
    assert heat is not None and heat.shape == cam.shape
    torch.testing.assert_close(heat, cam / cam.max(), atol=1e-4, rtol=1e-3)


@pytest.fixture(scope="module")
def small_detector() -> object:
    # min_size 128, max_size 160: a 160x100 picture stays 160x100 and is padded to 160x128.
    return load_model(
        "fasterrcnn_mobilenet_v3_large_320_fpn", weights="none", device="cpu", input_size=(128, 160)
    )


def test_every_recorder_sees_the_maps_cropped_to_the_image(small_detector: object) -> None:
    import re

    from actviz.hooks import eval_mode
    from actviz.top_images.plan import plan_layers
    from actviz.top_images.scoring import ScoreRecorder

    loaded = small_detector
    model = loaded.module  # type: ignore[attr-defined]
    names = [n for n, _ in model.named_modules() if re.fullmatch(r"backbone\.body\.\d+", n)]
    x = torch.rand((2, 3, 100, 160), generator=torch.Generator().manual_seed(0))
    padded: dict[str, torch.Tensor] = {}
    handles = [
        model.get_submodule(n).register_forward_hook(
            lambda _m, _i, out, n=n: padded.setdefault(n, out.clone())
        )
        for n in names
    ]
    with torch.inference_mode():
        images, _ = model.transform(list(x))
        model.backbone(images.tensors)
    for handle in handles:
        handle.remove()
    assert images.image_sizes == [(100, 160)] * 2 and images.tensors.shape[-2:] == (128, 160)
    # Each map keeps the rows that see the 100 rows of image: ceil(100 * h / 128).
    kept = {n: t[..., : -(-100 * t.shape[-2] // 128), :] for n, t in padded.items()}
    cropped = [n for n in names if kept[n].shape != padded[n].shape]
    assert "backbone.body.12" in cropped  # stride 16: 7 of 8 rows (112 channels)
    assert kept["backbone.body.12"].shape[-2:] == (7, 10)

    # A run's recorder: its tensors, and the statistics computed in the hook (on an
    # accelerator), see the cropped maps; so do --norm shared and --view pca, which read it.
    shapes: dict[str, tuple[int, ...]] = {}
    with (
        ActivationRecorder(
            model,
            names,
            summarize=lambda n, t: shapes.setdefault(n, tuple(t.shape)),
            per_image=True,
        ) as acts,
        eval_mode(model),
        torch.inference_mode(),
    ):
        DETECTION.call(model, x)
    for name in names:
        torch.testing.assert_close(acts[name], kept[name], rtol=1e-4, atol=1e-9)
        assert shapes[name] == tuple(kept[name].shape)
    (cap,) = [c for c in acts.captures if c.key == "backbone.body.12"]
    assert "padded its 160x100 input to 160x128" in str(cap.rows)

    # top-images: the plan and the scores are of the cropped map (the padding's cells differ).
    with eval_mode(model):
        planned = plan_layers(
            model,
            ["backbone.body.12"],
            {},
            input_size=(100, 160),
            in_chans=3,
            device=torch.device("cpu"),
            model_name="det",
        )
    assert planned.plans["backbone.body.12"].shape == tuple(kept["backbone.body.12"].shape[1:])
    with (
        ScoreRecorder(model, ["backbone.body.12"], planned.plans, "mean") as recorder,
        eval_mode(model),
        torch.inference_mode(),
    ):
        DETECTION.call(model, x)
        scores = recorder.take()["backbone.body.12"].scores
    assert not recorder.resized and not recorder.unfit
    means = kept["backbone.body.12"].mean(dim=(2, 3)).numpy()
    # Random weights give maps of about 1e-6: compared relative to their size.
    tiny = float(np.abs(means).max()) * 1e-4
    np.testing.assert_allclose(scores, means, rtol=1e-4, atol=tiny)
    whole = padded["backbone.body.12"].mean(dim=(2, 3)).numpy()
    assert np.abs(scores - whole).max() > 100 * tiny


def test_the_box_features_of_each_detection_are_the_box_head_on_its_final_box(
    small_detector: object, tmp_path: Path
) -> None:
    from actviz.hooks import eval_mode
    from actviz.run.families.detection.probe import DetectionProbe, found_in, with_heads

    loaded = small_detector
    model = loaded.module  # type: ignore[attr-defined]
    x = torch.rand((2, 3, 100, 160), generator=torch.Generator().manual_seed(1))
    lower_score_threshold(model, 0.0)
    try:
        with DetectionProbe(model) as probe, eval_mode(model), torch.inference_mode():
            outputs = DETECTION.call(model, x)
            probe.pool_boxes()
            # The same by hand, as torchvision's RoI heads pool their proposals.
            images, _ = model.transform(list(x))
            features = model.backbone(images.tensors)
            proposals, _ = model.rpn(images, features)
            detections, _ = model.roi_heads(features, proposals, images.image_sizes)
            boxes = [d["boxes"] for d in detections]
            pooled = model.roi_heads.box_roi_pool(features, boxes, images.image_sizes)
            expected = model.roi_heads.box_head(pooled)
    finally:
        model.roi_heads.score_thresh = 0.05
    found = with_heads([found_in(o, 0.0, loaded.categories) for o in outputs], outputs, probe)
    counts = [len(o["boxes"]) for o in outputs]
    assert counts == [len(b) for b in boxes] and min(counts) >= 4
    assert expected.shape == (sum(counts), 1024)
    for image, offset in ((0, 0), (1, counts[0])):
        f = found[image]
        assert f.head_shapes == {"box features": [counts[image], 1024]}
        assert len(f.heads) == 4
        for rank, panels in enumerate(f.heads):
            ((name, grid),) = panels
            assert name == "box features" and grid.shape == (32, 32)
            row = expected[offset + f.indices[rank]]
            np.testing.assert_allclose(grid.reshape(-1), row.numpy(), rtol=1e-4, atol=1e-6)

    # A run shows them for the top detections and records their shape.
    image = make_image(tmp_path / "wide.png", (160, 100))
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_mobilenet_v3_large_320_fpn", str(image), "--weights", "none"]
    argv += ["--input-size", "128,160", "--score-threshold", "0", "-l", "backbone.fpn"]
    result = runner.invoke(app, [*argv, "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (record,) = list(read_images(out))
    returned = record["detection_heads"]["box features"]
    assert returned[1] == 1024 and returned[0] >= len(record["detections"]) > 0
    assert record["detection_heads_file"] == "wide/detection_heads.png"
    picture = np.asarray(Image.open(out / "wide" / "detection_heads.png").convert("RGB"))
    from actviz.render.detection import HEAD_PANEL

    # Four rows of two panels (the box's crop, its features), each HEAD_PANEL wide.
    assert picture.shape[1] >= 2 * HEAD_PANEL and picture.shape[0] > 4 * HEAD_PANEL


def test_a_detector_object_is_given_back_with_its_score_threshold(tmp_path: Path) -> None:
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    import actviz

    model = fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, min_size=128, max_size=160
    )
    model.train()
    image = make_image(tmp_path / "a.png", (160, 100))
    result = actviz.run(
        model, image, out=tmp_path / "out", layers="backbone.fpn", score_threshold=0.0,
        report=False, stats=False,
    )  # fmt: skip
    # The run kept every box the model returned (its own cut lowered to 0)...
    (record,) = list(read_images(result.out))
    assert len(record["detections"]) == 100
    assert min(d["score"] for d in record["detections"]) < 0.05
    # ... and the model comes back with its own cut, in training mode, as it was given.
    assert model.roi_heads.score_thresh == 0.05
    assert model.training and model.roi_heads.training


def test_pca_over_a_detectors_maps_is_fitted_on_the_cropped_maps(
    small_detector: object, tmp_path: Path
) -> None:
    loaded = small_detector
    model = loaded.module  # type: ignore[attr-defined]
    out = tmp_path / "out"
    argv = ["run", "fasterrcnn_mobilenet_v3_large_320_fpn", str(tmp_path / "in"), "-w", "none"]
    argv += ["--input-size", "128,160", "-l", "backbone.body.12", "--view", "pca"]
    argv += ["--norm", "shared", "-o", str(out), "--no-report"]
    paths = [make_image(tmp_path / "in" / "0.png", (160, 100), seed=0)]
    assert runner.invoke(app, argv).exit_code == 0
    # A second image, and --resume: the first is only sampled for the fit, in a pass of its
    # own, which sees the cropped maps too.
    paths.append(make_image(tmp_path / "in" / "1.png", (160, 100), seed=1))
    result = runner.invoke(app, [*argv, "--resume"])
    assert result.exit_code == 0, result.output
    records = list(read_images(out))
    assert [r["layers"][0]["shape"] for r in records] == [[1, 112, 7, 10]] * 2
    assert all(r["layers"][0]["pca"] for r in records)
    fit = json.loads((out / "manifest.json").read_text())["pca"]["backbone.body.12"]
    assert fit["vectors"] == 2 * 7 * 10  # every position of the cropped maps, none of the padding

    # The explained variance of the positions of both images' cropped maps, by hand.
    maps: list[torch.Tensor] = []
    handle = model.backbone.body.get_submodule("12").register_forward_hook(
        lambda _m, _i, o: maps.append(o)
    )
    with torch.inference_mode():
        for path in paths:
            x = loaded.preprocess(Image.open(path))  # type: ignore[attr-defined]
            images, _ = model.eval().transform([x])
            assert images.tensors.shape[-2:] == (128, 160)
            model.backbone(images.tensors)
    handle.remove()
    vectors = torch.cat([m[0, :, :7].reshape(112, -1).T for m in maps]).double()
    variances = torch.linalg.svdvals(vectors - vectors.mean(0)) ** 2
    expected = (variances[:3] / variances.sum()).numpy()
    np.testing.assert_allclose(fit["explained_variance"], expected, rtol=1e-3, atol=1e-5)
