"""Feature visualization by optimization: on a model whose channels are known (a red
detector, a vertical-edge detector, a blue detector), the optimized image of a channel excites
it more than noise, than photos, and than the images optimized for the other channels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import UsageError
from actviz.optimize import StepReporter, optimize, optimize_batch, parse_channels
from tests.conftest import default_sigint

KNOWN = """
import torch
from torch import nn


class Known(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 5, padding=2)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4, 3)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.bias.fill_(0.5)  # alive on the grey first image: ReLU passes gradients
            self.conv.bias[0] = 2.0
            self.conv.weight[0, 0] = 0.2  # red minus the others
            self.conv.weight[0, 1:] = -0.1
            self.conv.weight[1, :, :, :2] = -0.2  # dark left, bright right: a vertical edge
            self.conv.weight[1, :, :, 3:] = 0.2
            self.conv.weight[2, 2] = 0.2  # blue minus the others
            self.conv.weight[2, :2] = -0.1
            self.conv.weight[3] = 0.05  # brightness
            self.head.weight.zero_()
            self.head.bias.zero_()
            self.head.weight[0, 0] = 1.0
            self.head.weight[1, 2] = 1.0
            self.head.weight[2, 1] = 1.0

    def forward(self, x):
        x = self.relu(self.conv(x))
        return self.head(x.mean((2, 3)))


def build():
    return Known()
"""

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("known")
    (root / "known.py").write_text(KNOWN)
    return f"{root / 'known.py'}:build"


@pytest.fixture(scope="module")
def net() -> Any:
    namespace: dict[str, Any] = {}
    exec(KNOWN, namespace)
    return namespace["build"]().eval()


def _channel_means(net: Any, images: np.ndarray) -> np.ndarray:
    """(N, 4): each channel's mean activation for uint8 (N, H, W, 3) images."""
    import torch

    x = torch.from_numpy(images).float().permute(0, 3, 1, 2) / 255
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        result: np.ndarray = net.relu(net.conv(x)).mean((2, 3)).numpy()
    return result


@pytest.fixture(scope="module")
def batch(net: Any) -> Any:
    return optimize_batch(
        net, "relu", [0, 1, 2], steps=96, size=48, mean=MEAN, std=STD, device="cpu", seed=3
    )


def test_parse_channels() -> None:
    assert parse_channels("0-3,7,2,9-10") == [0, 1, 2, 3, 7, 9, 10]
    with pytest.raises(UsageError, match="0-15"):
        parse_channels("a-b")
    with pytest.raises(UsageError):
        parse_channels("5-2")


def test_each_image_excites_its_own_channel_most(net: Any, batch: Any) -> None:
    assert batch.images.shape == (3, 48, 48, 3) and batch.images.dtype == np.uint8
    assert batch.curves.shape == (96, 3)
    means = _channel_means(net, batch.images)
    # The image of channel c excites c more than the images made for the other channels do.
    for i in range(3):
        others = [means[j, i] for j in range(3) if j != i]
        assert means[i, i] > 2 * max(others), (i, means)
    # ... more than noise and than photos (smooth pictures and flat greys).
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (8, 48, 48, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:48, 0:48]
    photos = np.stack(
        [np.stack([xx * 5, yy * 5, (xx + yy) * 2], -1).astype(np.uint8)]
        + [np.full((48, 48, 3), v, np.uint8) for v in (30, 128, 230)]
    )
    for c in range(3):
        assert means[c, c] > 1.5 * _channel_means(net, noise)[:, c].max()
        assert means[c, c] > 1.5 * _channel_means(net, photos)[:, c].max()
    # The objective rose along the way, and the final image agrees with the recorded value.
    first, last = batch.curves[:4].mean(0), batch.curves[-4:].mean(0)
    assert (last > 2 * np.maximum(first, 1e-3)).all(), (first, last)
    np.testing.assert_allclose(batch.final, np.diag(means), rtol=0.05, atol=0.02)
    # What the channels detect: red, a vertical edge (left dark, right bright), blue.
    red, blue = batch.images[0].astype(float), batch.images[2].astype(float)
    assert red[..., 0].mean() > red[..., 1:].mean() + 30
    assert blue[..., 2].mean() > blue[..., :2].mean() + 30


def test_hooks_removed_and_weights_restored(net: Any, batch: Any) -> None:
    assert not net.conv._forward_hooks and not net._forward_pre_hooks
    assert all(p.requires_grad for p in net.parameters())


def test_same_seed_same_pixels_whatever_the_batch(net: Any, batch: Any) -> None:
    again = optimize_batch(
        net, "relu", [0, 1, 2], steps=96, size=48, mean=MEAN, std=STD, device="cpu", seed=3
    )
    assert np.array_equal(again.images, batch.images)
    alone = optimize_batch(
        net, "relu", [2], steps=96, size=48, mean=MEAN, std=STD, device="cpu", seed=3
    )
    assert np.abs(alone.images[0].astype(int) - batch.images[2].astype(int)).max() <= 1
    other = optimize_batch(
        net, "relu", [0], steps=96, size=48, mean=MEAN, std=STD, device="cpu", seed=4
    )
    assert not np.array_equal(other.images[0], batch.images[0])


def test_neuron_and_logit_objectives(net: Any) -> None:
    import torch

    # The red channel's centre unit: red where the centre unit looks, grey far from it.
    neuron = optimize_batch(
        net, "relu", [0], steps=32, size=33, mean=MEAN, std=STD, device="cpu", neuron=True
    )
    assert neuron.curves[-4:].mean() > 3 * max(neuron.curves[:2].mean(), 1e-3)
    x = torch.from_numpy(neuron.images).float().permute(0, 3, 1, 2) / 255
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        maps = net.relu(net.conv(x))[0, 0]
    assert maps[16, 16] > 1.5 * maps.mean()
    assert maps[8:25, 8:25].mean() > 2 * maps[-6:, -6:].mean()
    # Class 1 of the head reads channel 2 (blue): its logit is maximized by blue.
    logit = optimize_batch(net, None, [1], steps=48, size=32, mean=MEAN, std=STD, device="cpu")
    assert logit.output_shape == (1, 3)
    blue = logit.images[0].astype(float)
    assert blue[..., 2].mean() > blue[..., :2].mean() + 30
    with pytest.raises(UsageError, match=r"layer conv has 4 channels \(0-3\)"):
        optimize_batch(net, "conv", [9], steps=1, size=32, mean=MEAN, std=STD, device="cpu")


def test_library_writes_images_sheet_json_and_page(known: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = optimize(known, layers="relu", channels="0-2", steps=8, size=32, out=out)
    doc = json.loads((out / "optimize.json").read_text())
    assert doc["complete"] is True and doc["weights"]["random"] is False
    (layer,) = doc["layers"]
    assert layer["name"] == "relu" and layer["sheet"] == "optimize/00_relu.png"
    assert [c["channel"] for c in layer["channels"]] == [0, 1, 2]
    assert all(len(c["curve"]) == 8 for c in layer["channels"])
    png = np.asarray(Image.open(out / layer["channels"][0]["png"]))
    assert png.shape == (32, 32, 3)
    assert np.array_equal(png, np.asarray(Image.open(out / "optimize/00_relu/c0000.png")))
    sheet = np.asarray(Image.open(out / layer["sheet"]))
    assert sheet.ndim == 3 and sheet.shape[0] > 32
    assert result.channels == 3 and result.report == out / "optimize.html"
    page = (out / "optimize.html").read_text()
    assert "optimize/00_relu/c0001.png" in page
    with pytest.raises(Exception, match="overwrite=True"):
        optimize(known, layers="relu", channels="0", steps=1, size=32, out=out)


class _StopAfter(StepReporter):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    def advance(self, result: object = None) -> None:
        self.steps -= 1
        if self.steps == 0:
            raise KeyboardInterrupt


def test_interrupt_keeps_the_finished_channels(known: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        # Batches of two channels, 6 steps each: stopped in the second batch.
        optimize(
            known,
            layers="relu",
            channels="0-3",
            steps=6,
            size=32,
            batch_size=2,
            out=out,
            reporter=_StopAfter(9),
        )
    doc = json.loads((out / "optimize.json").read_text())
    assert doc["complete"] is False
    assert [c["channel"] for c in doc["layers"][0]["channels"]] == [0, 1]
    for c in doc["layers"][0]["channels"]:
        assert np.asarray(Image.open(out / c["png"])).shape == (32, 32, 3)
    assert (out / "optimize/00_relu.png").is_file()
    assert "stopped early" in (out / "optimize.html").read_text()
    assert not list(out.rglob("*.tmp*"))


def test_cli_end_to_end_with_random_weights(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "resnet18",
            "--weights",
            "none",
            "--layers",
            "layer1.0.conv1",
            "--channels",
            "0-2",
            "--steps",
            "8",
            "--size",
            "64",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "noise with structure" in result.output
    doc = json.loads((out / "optimize.json").read_text())
    assert doc["weights"]["random"] is True and "noise with structure" in doc["random_weights_note"]
    layer = doc["layers"][0]
    assert layer["output_shape"][1] == 64 and len(layer["channels"]) == 3
    assert "RANDOM WEIGHTS" in (out / "optimize.html").read_text()
    bad = CliRunner().invoke(
        app,
        [
            "optimize",
            "resnet18",
            "--weights",
            "none",
            "--channels",
            "x",
            "--out",
            str(tmp_path / "o2"),
        ],
    )
    assert bad.exit_code == 2 and "--channels" in bad.output


def test_pages_link_top_images_of_the_same_channels(known: str, tmp_path: Path) -> None:
    from actviz.top_images import top_images

    photos = tmp_path / "photos"
    photos.mkdir()
    for i, colour in enumerate([(200, 30, 30), (30, 30, 200), (128, 128, 128)]):
        Image.fromarray(np.full((40, 40, 3), colour, np.uint8)).save(photos / f"p{i}.png")
    out = tmp_path / "out"
    top_images(known, [photos], out=out, layers="relu", k=2, input_size=(32, 32), tile=32)
    optimize(known, layers="relu", channels="0-1", steps=4, size=32, out=out)
    page = (out / "optimize.html").read_text()
    assert "top-images/00_relu/c0000.html" in page
    assert "top-images.html" in page
    doc = json.loads((out / "top-images.json").read_text())
    layer = doc["layers"][0]
    folder = layer.get("folder")
    channel0 = (out / folder / "c0000.html").read_text()
    channel3 = (out / folder / "c0003.html").read_text()
    assert "optimize/00_relu/c0000.png" in channel0 and "optimize.html" in channel0
    assert "optimize/00_relu" not in channel3  # channel 3 was not optimized


@pytest.mark.slow
def test_ctrl_c_mid_run_exits_130_with_the_finished_channels(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    args = ["-w", "none", "-l", "layer1.0.conv1", "--channels", "0-5", "-b", "2"]
    args += ["--steps", "400", "--size", "32", "-o", str(out), "-q"]
    with default_sigint():
        proc = subprocess.Popen(
            [sys.executable, "-m", "actviz", "optimize", "resnet18", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TORCH_HOME": "/nonexistent-torch-home"},
        )
    deadline = time.monotonic() + 240
    record = out / "optimize.json"
    while not record.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "finished channels are kept" in stderr
    doc = json.loads(record.read_text())
    assert doc["complete"] is False
    finished = doc["layers"][0]["channels"]
    assert 2 <= len(finished) < 6 and len(finished) % 2 == 0
    for c in finished:
        assert np.asarray(Image.open(out / c["png"])).shape == (32, 32, 3)
        assert len(c["curve"]) == 400
    assert (out / "optimize" / "00_layer1.0.conv1.png").is_file()
    assert not [p for p in out.rglob("*") if "tmp" in p.name]
