"""The Ray engine when an actor's process dies: the batch is retried on a fresh actor, and a
batch that keeps killing its actor fails by name while the run goes on."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app

runner = CliRunner()

# A model whose forward kills its own process (never the test's, which plans the layers with a
# forward of its own): on the first call anywhere ("once", a marker file remembers it), or on
# every batch that holds a pure red image ("red").
KILLER = """
import os

import torch
from torch import nn

MARKER = {marker!r}
MODE = {mode!r}
DRIVER = {driver}


class Killer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if os.getpid() != DRIVER:
            if MODE == "once" and not os.path.exists(MARKER):
                open(MARKER, "w").close()
                os._exit(1)
            if MODE == "red" and bool(((x[:, 0] > 2.0) & (x[:, 1] < -1.5)).any()):
                os._exit(1)
        return self.conv(x)


def build():
    return Killer()
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray instance on 2 CPUs for the module (the engine joins it, and leaves it up)."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        logging_level=logging.ERROR,
    )
    yield
    ray.shutdown()


def _setup(root: Path, mode: str) -> tuple[str, Path]:
    model = root / "killer.py"
    marker = root / "killed-once"
    model.write_text(KILLER.format(marker=str(marker), mode=mode, driver=os.getpid()))
    photos = root / "photos"
    photos.mkdir()
    for i in range(13):
        color = (255, 0, 0) if i == 5 and mode == "red" else (20 * i,) * 3
        Image.fromarray(np.full((20, 20, 3), color, np.uint8)).save(photos / f"img{i:02d}.png")
    return f"{model}:build", photos


def _top_images(model: str, photos: Path, out: Path, *engine: str) -> tuple[int, str, dict]:
    result = runner.invoke(
        app,
        ["top-images", model, str(photos), "-w", "none", "-l", "conv", "-k", "3"]
        + ["--input-size", "16,16", "-b", "3", "-o", str(out), "--no-report", *engine],
    )
    doc = json.loads((out / "top-images.json").read_text()) if result.exit_code in (0, 3) else {}
    return result.exit_code, result.stderr, doc


@pytest.mark.ray
@pytest.mark.slow
def test_a_batch_whose_actor_died_is_retried_on_a_fresh_one(
    local_ray: None, tmp_path: Path
) -> None:
    model, photos = _setup(tmp_path, "once")
    code, stderr, doc = _top_images(
        model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "2"
    )
    assert (tmp_path / "killed-once").exists()  # an actor did die
    assert code == 0, stderr
    assert doc["images"] == 13 and doc["failed_count"] == 0 and doc["failed"] == []
    local = _top_images(model, photos, tmp_path / "local")
    assert local[0] == 0 and local[2]["layers"] == doc["layers"]  # the same top images


@pytest.mark.ray
@pytest.mark.slow
def test_a_batch_that_kills_every_actor_fails_by_name_and_the_run_goes_on(
    local_ray: None, tmp_path: Path
) -> None:
    model, photos = _setup(tmp_path, "red")
    code, stderr, doc = _top_images(
        model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "2"
    )
    assert code == 3, stderr  # finished, some inputs failed
    failed = {Path(f["path"]).name: f["reason"] for f in doc["failed"]}
    # Batches of 3 in path order: img03-img05 held the red image.
    assert sorted(failed) == ["img03.png", "img04.png", "img05.png"]
    for reason in failed.values():
        assert reason.startswith(
            "the Ray worker died while processing this batch (retried 2 times)"
        ), reason
        assert "\n" not in reason
    assert doc["images"] == 10 and doc["failed_count"] == 3
    assert "failed: " in stderr and "img04.png" in stderr and "Traceback" not in stderr
    tops = {Path(e["path"]).name for c in doc["layers"][0]["channels"] for e in c["top"]}
    assert tops and not tops & set(failed)
