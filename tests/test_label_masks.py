"""`actviz label --masks` on the planted model: the detectors labelled by IoU, the thresholds
and the IoU equal to a brute-force computation over every map; and `--clip` from a local
open_clip checkpoint (a tiny one written by the test), its own mean and std recorded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import actviz
from tests.concept_data import write_factory, write_masks, write_squares


@pytest.mark.slow
def test_masks_label_the_detectors_and_iou_equals_brute_force(tmp_path: Path) -> None:
    import torch
    import torch.nn.functional as F

    from actviz.io.images import load_rgb
    from actviz.label.masks import iou_grid, load_mask
    from actviz.models import Preprocessing

    model = write_factory(tmp_path)
    held = write_squares(tmp_path / "images", 50, seed=4, share=0.2, single=True)
    masks = write_masks(tmp_path / "masks", held)
    result = actviz.label(
        model,
        tmp_path / "images",
        layers="1",
        masks=masks,
        input_size=(32, 32),
        out=tmp_path / "out",
        batch_size=7,
        learnability=False,
    )
    layer = json.loads(result.record.read_text())["layers"][0]
    assert layer["metric"] == "iou"
    labels = {r["unit"]: r for r in layer["records"] if r["label"]}
    assert sorted(labels) == [0, 1, 2]
    for unit, colour in enumerate(["red", "green", "blue"]):
        assert labels[unit]["label"] == colour
        assert labels[unit]["score"] >= 0.5 and labels[unit]["p"] < 0.001
    # Brute force: every map of every image at once.
    namespace: dict[str, object] = {}
    exec((tmp_path / "planted.py").read_text(), namespace)
    net = namespace["build"]()  # type: ignore[operator]
    preprocess = Preprocessing.fitted(input_size=(32, 32))
    names = sorted(held)
    with torch.no_grad():
        x = torch.stack([preprocess(load_rgb(tmp_path / "images" / n)) for n in names])
        maps = net[1](net[0](x))  # (N, 8, 32, 32)
    every = maps.transpose(0, 1).reshape(8, -1).numpy()
    k = math.ceil(0.005 * len(names) * 32 * 32)
    thresholds = -np.sort(-every, axis=1)[:, k - 1]
    assert layer["thresholds"] == pytest.approx(thresholds.tolist(), rel=1e-5)
    grid = iou_grid((32, 32))
    up = F.interpolate(maps, size=grid, mode="bilinear", align_corners=False).numpy()
    t = thresholds[None, :, None, None]
    marked = (up >= t) & ((t > 0) | (up > t))
    colours = ["blue", "green", "red"]  # the masks' folders, sorted
    held_masks = np.zeros((len(names), 3, *grid), dtype=bool)
    for i, name in enumerate(names):
        for c, colour in enumerate(colours):
            file = masks / colour / name
            if file.exists():
                held_masks[i, c] = load_mask(file, preprocess, grid)
    inter = (marked[:, :, None] & held_masks[:, None]).sum(axis=(0, 3, 4))
    union = (marked[:, :, None] | held_masks[:, None]).sum(axis=(0, 3, 4))
    brute = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
    assert np.array(layer["tables"]["iou"]) == pytest.approx(brute, rel=1e-5, abs=1e-9)


def _tiny_clip(folder: Path) -> Path:
    """A folder in the layout of open_clip's Hub models: a tiny CLIP's config, with its own
    mean and std, and its random weights."""
    import torch

    open_clip = pytest.importorskip("open_clip")
    config = {
        "model_cfg": {
            "embed_dim": 16,
            "vision_cfg": {
                "image_size": 32,
                "layers": 1,
                "width": 32,
                "patch_size": 16,
                "head_width": 16,
            },
            "text_cfg": {
                "context_length": 77,
                "vocab_size": 49408,
                "width": 16,
                "heads": 2,
                "layers": 1,
            },
        },
        "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    }
    folder.mkdir(parents=True)
    (folder / "open_clip_config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    model = open_clip.CLIP(**config["model_cfg"])
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    return folder


@pytest.mark.slow
def test_clip_tags_from_a_local_checkpoint_with_its_own_mean_and_std(tmp_path: Path) -> None:
    from actviz.label import LabelOptions
    from actviz.label.clip import clip_concepts

    clip = _tiny_clip(tmp_path / "clip")
    write_squares(tmp_path / "images", 12, seed=5)
    paths = sorted((tmp_path / "images").iterdir())
    (tmp_path / "images" / "broken.png").write_bytes(b"not a picture")
    words = tmp_path / "words.txt"
    words.write_text("# colours\nred\ngreen\n\nblue\nsky\nred\n")
    opts = LabelOptions(clip=str(clip), words=words, clip_top=2, out=tmp_path / "out")
    concepts = clip_concepts(opts, [*paths, tmp_path / "images" / "broken.png"])
    assert concepts.source == "clip" and concepts.names == ["red", "green", "blue", "sky"]
    # Every readable image tagged with exactly its two nearest words; the broken one, none.
    assert concepts.labels.sum(axis=1).tolist() == [2] * 12 + [0]
    extra = concepts.extra
    assert extra["architecture"] == f"local-dir:{clip}" and extra["top"] == 2
    # The checkpoint's own mean and std (its open_clip_config.json), not OpenAI's defaults.
    assert extra["mean"] == [0.5, 0.5, 0.5] and extra["std"] == [0.25, 0.25, 0.25]
    assert str(extra["mean_std_from"]).endswith("open_clip_config.json")


def test_clip_refuses_what_is_not_a_local_checkpoint(tmp_path: Path) -> None:
    from actviz.errors import UsageError
    from actviz.label import LabelOptions
    from actviz.label.clip import clip_concepts

    words = tmp_path / "words.txt"
    words.write_text("red\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for spec, said in (
        (f"ViT-B-32@{tmp_path / 'missing.bin'}", "is no local file"),
        (str(empty), "holds no open_clip_config.json"),
        ("laion2b_s34b_b79k", "no such folder"),
    ):
        opts = LabelOptions(clip=spec, words=words, out=tmp_path / "out")
        with pytest.raises(UsageError, match=said) as caught:
            clip_concepts(opts, [])
        assert "offline" in str(caught.value)


@pytest.mark.slow
def test_masks_resume_gives_the_iou_of_an_uninterrupted_run(tmp_path: Path) -> None:
    model = write_factory(tmp_path)
    held = write_squares(tmp_path / "images", 24, seed=7, share=0.2, single=True)
    masks = write_masks(tmp_path / "masks", held)
    common = {
        "layers": "1",
        "masks": masks,
        "input_size": (32, 32),
        "batch_size": 5,
        "learnability": False,
        "report": False,
    }
    fresh = actviz.label(model, tmp_path / "images", out=tmp_path / "fresh", **common)
    out = tmp_path / "out"
    actviz.label(model, tmp_path / "images", out=out, **common)
    # Stopped in the second pass: its last two batches gone, the first pass kept.
    ledger = out / "label.jsonl"
    lines = ledger.read_bytes().splitlines(keepends=True)
    assert sum(b'"pass":2' in line for line in lines) == 5
    ledger.write_bytes(b"".join(lines[:-2]))
    resumed = actviz.label(model, tmp_path / "images", out=out, resume=True, **common)
    assert resumed.reused == 24
    first = json.loads(fresh.record.read_text())["layers"][0]
    again = json.loads(resumed.record.read_text())["layers"][0]
    assert again["thresholds"] == first["thresholds"]
    assert again["tables"]["iou"] == first["tables"]["iou"]
    assert again["records"] == first["records"]
