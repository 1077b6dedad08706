"""The Python API takes a model object (``nn.Module``) wherever it takes a model name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import actviz
from actviz.errors import UsageError
from actviz.models import Preprocessing


def _tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 5, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(5, 3),
    )


@pytest.fixture
def photos(tmp_path: Path, make_photos: Callable[..., Path]) -> Path:
    return make_photos(3, size=(40, 32), folder=tmp_path / "photos")


SMALL: dict[str, Any] = {"input_size": (32, 32), "device": "cpu", "report": False}


def test_run_takes_a_module_and_gives_it_back_as_it_came(photos: Path, tmp_path: Path) -> None:
    model = _tiny().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = actviz.run(model, [photos], out=tmp_path / "out", layers="Conv2d", **SMALL)
    assert result.model == "Sequential"
    assert result.layers == ["0", "2"]
    assert result.weights.source == "module"
    assert [r.status for r in result.images] == ["ok"] * 3
    layer = result.images[0].layers[1]
    assert layer.shape == (1, 5, 32, 32) and layer.channels_total == 5
    assert layer.file is not None
    assert np.asarray(Image.open(tmp_path / "out" / layer.file)).std() > 0
    record = json.loads(result.manifest.read_text())
    assert record["model"] == "Sequential" and record["weights"]["source"] == "module"
    # The caller's model: still in training mode, same weights.
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_given_preprocessing_replaces_the_default(photos: Path, tmp_path: Path) -> None:
    prep = Preprocessing.fitted(resize=24, crop=24, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    result = actviz.run(
        _tiny(),
        [photos],
        out=tmp_path / "out",
        layers="0",
        device="cpu",
        report=False,
        preprocess=prep,
    )
    record = json.loads(result.manifest.read_text())
    assert record["options"]["input_size"] == [24, 24]
    with pytest.raises(UsageError, match="Preprocessing"):
        actviz.run(_tiny(), [photos], out=tmp_path / "bad", preprocess="imagenet", **SMALL)
    assert not (tmp_path / "bad").exists()


def test_top_images_takes_a_module(photos: Path, tmp_path: Path) -> None:
    result = actviz.top_images(_tiny(), [photos], out=tmp_path / "top", layers="2", k=2, **SMALL)
    assert result.model == "Sequential"
    assert result.images == 3 and not result.failed
    assert result.layers[0].key == "2" and result.layers[0].channels == 5
    doc = json.loads(result.json.read_text())
    assert doc["model"] == "Sequential"


def test_diff_takes_modules_and_a_checkpoint_into_a_copy(photos: Path, tmp_path: Path) -> None:
    model = _tiny()
    same = actviz.diff(
        model, [photos], against_model=_tiny(), out=tmp_path / "same", layers="Conv2d", **SMALL
    )
    assert [round(layer.cosine or 0, 6) for layer in same.layers] == [1.0, 1.0]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["2.weight"] = state["2.weight"] * -1.0
    ckpt = tmp_path / "flipped.pt"
    torch.save(state, ckpt)
    flipped = actviz.diff(
        model, [photos], against=ckpt, out=tmp_path / "flipped", layers="Conv2d", **SMALL
    )
    assert flipped.layers[0].cosine == pytest.approx(1.0)
    assert flipped.first_divergent == "2"
    # The checkpoint went into a copy: the caller's model keeps its weights.
    assert torch.equal(model.state_dict()["2.weight"], _tiny().state_dict()["2.weight"])


def test_the_ray_engine_refuses_a_model_object_by_name(photos: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="model name"):
        actviz.top_images(_tiny(), [photos], out=tmp_path / "t", engine="ray", **SMALL)
    with pytest.raises(UsageError, match="model name"):
        actviz.run(_tiny(), [photos], out=tmp_path / "r", engine="ray", **SMALL)
    assert not (tmp_path / "t").exists() and not (tmp_path / "r").exists()


def test_the_counts_match_the_files_on_disk(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = actviz.run(_tiny(), [photos], out=out, layers="Conv2d", grads=True, **SMALL)
    grids = [layer.file for image in result.images for layer in image.layers if layer.file]
    assert result.grids_written == len(grids) == 6
    on_disk = [
        p
        for image in result.images
        for p in (out / image.out_dir.as_posix()).iterdir()
        if p.is_file()
    ]
    # Grids, gradient grids, the input thumbnail and the gradient chart of each image.
    assert result.files_written == len(on_disk) > result.grids_written
