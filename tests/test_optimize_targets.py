"""What optimize maximizes: the positions of token layers (the middle patch, not the middle of
the sequence; prefix tokens out of the mean), channels and classes beyond the output refused as
usage errors before anything is written, a features model's output called output dimensions,
and the cost and progress said on a piped stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import UsageError
from actviz.optimize.loop import LayerTarget
from actviz.optimize.objective import objective_for, positions
from actviz.optimize.probe import reads_classes

NETS = """
import torch
from torch import nn


class Features(nn.Module):
    '''Two convolutions (8 then 4 channels); the output is the pooled map: no head.'''

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.conv1(x)))).mean((2, 3))


class Classifier(Features):
    '''The same with a linear head of 3 classes.'''

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(super().forward(x))


def features():
    return Features()


def classifier():
    return Classifier()
"""

LAYER = "encoder.layers.encoder_layer_0"


@pytest.fixture(scope="module")
def nets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nets")
    (root / "nets.py").write_text(NETS)
    return root / "nets.py"


@pytest.fixture(scope="module")
def vit() -> Any:
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(
        image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()


def _tokens(model: Any, layer: str, batch: int, side: int = 32) -> Any:
    """The layer's output for ``batch`` random images, with its graph."""
    import torch

    torch.manual_seed(1)
    with LayerTarget(model, layer) as target:
        return target.forward(torch.randn(batch, 3, side, side))


def test_token_positions_leave_out_the_class_token_and_centre_on_the_grid(vit: Any) -> None:
    from actviz.layouts import layer_contexts

    ctx = layer_contexts(vit, (32, 32))[LAYER]
    grid = positions((17, 16), ctx)  # 1 class token + 4 x 4 patches, 16 channels
    assert grid is not None and grid.shape == (16, 4, 4)
    # Channel c at patch (y, x) is token 1 + 4y + x of the (17, 16) output.
    for c in (0, 5, 15):
        assert grid[c, 0, 0] == 1 * 16 + c
        assert grid[c, 2, 2] == (1 + 2 * 4 + 2) * 16 + c  # the middle patch: token 11
        assert grid[c, 3, 3] == 16 * 16 + c
    assert (grid >= 16).all()  # no position is the class token's


def test_mean_and_neuron_of_a_vit_layer_against_the_captured_tokens(vit: Any) -> None:
    import torch

    from actviz.layouts import layer_contexts

    ctx = layer_contexts(vit, (32, 32))[LAYER]
    out = _tokens(vit, LAYER, 3)
    assert out.shape == (3, 17, 16)
    channels = [2, 7, 11]
    mean = objective_for(out, channels, neuron=False, ctx=ctx, where=f"layer {LAYER}")
    neuron = objective_for(out, channels, neuron=True, ctx=ctx, where=f"layer {LAYER}")
    got_mean, got_neuron = mean(out).detach(), neuron(out).detach()
    for i, c in enumerate(channels):
        patches = out[i, 1:, c].detach()
        torch.testing.assert_close(got_mean[i], patches.mean(), rtol=1e-5, atol=1e-6)
        # With the class token the mean is another number: the test can tell them apart.
        assert abs(float(out[i, :, c].detach().mean() - patches.mean())) > 1e-4
        assert float(got_neuron[i]) == float(out[i, 11, c].detach())
    # The gradient the images get: 1/16 on each patch token of their channel, none on the
    # class token or on other channels.
    (grad,) = torch.autograd.grad(mean(out).sum(), out)
    for i, c in enumerate(channels):
        assert float(grad[i, 0].abs().sum()) == 0.0
        torch.testing.assert_close(grad[i, 1:, c], torch.full((16,), 1 / 16))
        assert float(grad[i].abs().sum()) == pytest.approx(1.0)


def test_timm_register_tokens_are_left_out() -> None:
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from actviz.layouts import layer_contexts

    torch.manual_seed(0)
    model = VisionTransformer(
        img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2, reg_tokens=4
    ).eval()
    ctx = layer_contexts(model, (32, 32))["blocks.0"]
    assert ctx.prefix_tokens == 5
    out = _tokens(model, "blocks.0", 2)
    assert out.shape == (2, 21, 16)
    mean = objective_for(out, [3, 4], neuron=False, ctx=ctx, where="layer blocks.0")
    neuron = objective_for(out, [3, 4], neuron=True, ctx=ctx, where="layer blocks.0")
    for i, c in enumerate([3, 4]):
        torch.testing.assert_close(
            mean(out)[i].detach(), out[i, 5:, c].detach().mean(), rtol=1e-5, atol=1e-6
        )
        assert float(neuron(out)[i].detach()) == float(out[i, 5 + 2 * 4 + 2, c].detach())


def test_a_first_dimension_that_is_not_the_batch_is_refused() -> None:
    import torch

    windows = torch.zeros(8, 16, 4)  # 2 images x 4 windows of 16 tokens
    with pytest.raises(UsageError, match="first dimension is not the batch"):
        objective_for(windows, [0, 1], neuron=False, ctx=None, where="layer attn")


def test_reads_classes_from_the_models_metadata() -> None:
    def loaded(**kw: Any) -> Any:
        base = {"classifier": True, "categories": None, "source": "torchvision"}
        return SimpleNamespace(**{**base, **kw})

    assert not reads_classes(loaded(classifier=False, source="timm"), "head")
    assert not reads_classes(loaded(classifier=False, source="huggingface"), None)
    assert reads_classes(loaded(categories=["tench"]), None)
    assert reads_classes(loaded(), None)  # torchvision builds classifiers
    assert not reads_classes(loaded(source="factory"), None)  # pooled features, no head
    assert reads_classes(loaded(source="factory"), "head")


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["optimize", *args])


def test_channels_beyond_a_layer_exit_2_before_anything_is_written(
    nets: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # conv1 has 8 channels, conv2 only 4: conv2 is refused before conv1 is optimized.
    result = _invoke(f"{nets}:features", "-l", "conv", "--channels", "5-6", "-o", str(out))
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "--channels 5: layer conv2 has 4 channels (0-3)" in message
    assert not (out / "optimize.json").exists() and not (out / "optimize").exists()


def test_objective_beyond_the_classes_names_objective_and_the_range(tmp_path: Path) -> None:
    result = _invoke("resnet18", "-w", "none", "--objective", "1000", "-o", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "--objective 1000: the model's output has 1000 classes (0-999)" in message
    assert "--channels" not in message


def test_objective_on_a_features_model_is_an_output_dimension(nets: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--objective", "1", "--steps", "2", "--size", "32", "-o", str(out)]
    result = _invoke(f"{nets}:features", *args)
    assert result.exit_code == 0, result.output
    assert "output: 1 output dimensions; highest: dimension 1" in result.output
    doc = json.loads((out / "optimize.json").read_text())
    settings = doc["settings"]
    assert settings["objective"] == "output" and settings["maximizes"] == "output dimension"
    assert settings["classes"] is None and settings["dimensions"] == "1"
    (layer,) = doc["layers"]
    assert layer["name"] == "output" and layer["unit"] == "dimension"
    assert layer["sheet"] == "optimize/00_output.png" and (out / layer["sheet"]).is_file()
    page = (out / "optimize.html").read_text()
    assert "output dimension" in page and "class logit" not in page
    refused = _invoke(f"{nets}:features", "--objective", "4", "-o", str(tmp_path / "o2"))
    assert refused.exit_code == 2
    assert "has 4 output dimensions (it gives features, not classes) (0-3)" in " ".join(
        refused.output.split()
    )
    # The same network with a linear head: class logits.
    out = tmp_path / "head"
    result = _invoke(f"{nets}:classifier", *args[:-1], str(out))
    assert result.exit_code == 0, result.output
    assert "logits: 1 classes; highest: class 1" in result.output
    doc = json.loads((out / "optimize.json").read_text())
    assert doc["settings"]["objective"] == "logit" and doc["settings"]["classes"] == "1"
    assert doc["layers"][0]["name"] == "logits" and doc["layers"][0]["unit"] == "class"


def test_piped_stderr_gets_the_cost_and_plain_progress_lines(nets: Path, tmp_path: Path) -> None:
    args = ["-l", "conv1", "--channels", "0-1", "--steps", "40", "--size", "32"]
    proc = subprocess.run(
        [sys.executable, "-m", "actviz", "optimize", f"{nets}:features", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    cost = [line for line in lines if line.startswith("optimize: 40 steps")]
    assert len(cost) == 1, proc.stderr
    assert re.fullmatch(
        r"optimize: 40 steps at [\d.e-]+ s a step: about \d+(\.\d)? (s|min|h) in all; "
        r"--steps and --size lower it",
        cost[0],
    ), cost
    found = [
        re.match(r"optimize: (\d+) of 40 steps \((\d+)%\), .* s a step, about .* left$", x)
        for x in lines
    ]
    steps = [int(m.group(1)) for m in found if m]
    # One line each tenth of the steps (and one every half minute, if a step is that slow).
    assert {4, 8, 12, 16, 20, 24, 28, 32, 36} <= set(steps), proc.stderr
    assert steps == sorted(steps) and max(steps) < 40
    assert "\x1b[" not in proc.stderr  # plain lines, no bar
    quiet = subprocess.run(
        [
            sys.executable,
            "-m",
            "actviz",
            "optimize",
            f"{nets}:features",
            *args,
            "-q",
            "-o",
            "q",
            "--overwrite",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "optimize:" not in quiet.stderr
    assert len(json.loads((tmp_path / "q/optimize.json").read_text())["layers"]) == 1


def test_the_estimate_leaves_out_the_first_steps_warm_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import actviz.cli.optimize as cli

    clock = iter([0.0, 5.0, 5.5, 6.0, 36.5, 37.0])
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    bar = cli._Bar(quiet=False)
    bar.start(1000)
    for _ in range(5):
        bar.advance()
    lines = capsys.readouterr().err.splitlines()
    # 5 s of warm-up, then 0.5 s a step: 5 s + 0.5 s x 999 steps, about 8 min in all.
    assert lines[0] == (
        "optimize: 1000 steps at 0.5 s a step: about 8 min in all; --steps and --size lower it"
    )
    # Not a tenth yet, but half a minute since the last line: 31.5 s over 3 steps since the
    # first, 10.5 s a step.
    assert lines[1:] == ["optimize: 4 of 1000 steps (0%), 10 s a step, about 2.9 h left"]


def test_a_model_optimize_does_not_take_leaves_no_folder(tmp_path: Path) -> None:
    """Refused after the output folder was prepared: the empty folder goes again."""
    factory = tmp_path / "clips.py"
    factory.write_text(
        "from torch import nn\n\n"
        "def build():\n"
        "    model = nn.Sequential(nn.Conv3d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))\n"
        "    model.actviz_family = 'video'\n"
        "    return model\n"
    )
    out = tmp_path / "o"
    result = _invoke(f"{factory}:build", "--steps", "2", "-o", str(out))
    assert result.exit_code == 2
    assert "optimize does not take" in result.output and "use an image model" in result.output
    assert not out.exists()
