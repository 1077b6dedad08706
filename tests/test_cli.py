"""The CLI end to end: resnet18 with random weights on generated images."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image, run_images

runner = CliRunner()


def _no_tmp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if "actviz-tmp" in p.name]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import urllib.error

    import torch

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))

    def fail(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(torch.hub, "download_url_to_file", fail)


@pytest.mark.slow
def test_run_writes_grids_and_manifest(tmp_path: Path, image_file: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["run", "resnet18", str(image_file), "--layers", "conv", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "RANDOM WEIGHTS" in result.stderr and "--weights none" in result.stderr
    assert "wrote 20 grids for 1 image(s)" in result.stdout
    assert "top-5" in result.stdout

    files = sorted((out / "dog").glob("[0-9]*_*.png"))
    assert len(files) == 20  # resnet18: 17 convs + 3 downsample convs
    assert (out / "dog" / "input.png").is_file()  # what the model saw, for the report
    assert (out / "index.html").is_file() and (out / "stats.json").is_file()
    assert files[0].name == "00_conv1.png" and files[-1].name == "19_layer4.1.conv2.png"

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == "resnet18"
    assert manifest["weights"]["random"] is True and manifest["weights"]["source"] == "random"
    assert manifest["device"] == "cpu" and manifest["selector"] == "conv"
    assert manifest["images"]["count"] == manifest["images"]["ok"] == 1
    image = run_images(out)[0]
    assert image["status"] == "ok" and len(image["predictions"]) == 5
    first = image["layers"][0]
    assert first["name"] == "conv1" and first["type"] == "Conv2d" and first["call"] == 1
    assert first["shape"] == [1, 64, 112, 112]
    assert first["min"] < 0 < first["max"]
    assert first["channels_shown"] == 64 and first["file"] == "dog/00_conv1.png"
    last = image["layers"][-1]
    assert last["shape"] == [1, 512, 7, 7] and last["channels_total"] == 512

    # The grids are pictures of the maps, not blank canvases.
    with Image.open(out / "dog" / "00_conv1.png") as png:
        assert png.mode == "P"
        pixels = np.asarray(png.convert("RGB"))
    assert pixels.shape[0] > 8 * 112 and pixels.shape[1] >= 8 * 112
    assert pixels.std() > 20
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100
    assert _no_tmp_files(out)


@pytest.mark.slow
def test_reused_relu_and_max_channels_and_json(tmp_path: Path, image_file: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "run",
            "resnet18",
            str(image_file),
            "-l",
            "layer1.0.relu",
            "-l",
            "layer1.0.bn1",
            "--weights",
            "none",
            "--max-channels",
            "8",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "RANDOM WEIGHTS" not in result.stderr  # asked for explicitly
    data = json.loads(result.stdout)
    assert data == json.loads((out / "manifest.json").read_text())
    assert data["images"]["count"] == data["images"]["ok"] == 1
    layers = run_images(out)[0]["layers"]
    assert [x["name"] for x in layers] == ["layer1.0.bn1", "layer1.0.relu", "layer1.0.relu:2"]
    assert [x["call"] for x in layers] == [1, 1, 2]
    assert layers[0]["min"] < 0  # bn1 copied before the in-place ReLU
    assert layers[1]["min"] >= 0
    assert all(x["channels_shown"] == 8 and x["channels_total"] == 64 for x in layers)
    assert [p.name for p in sorted((out / "dog").glob("[0-9]*_*.png"))] == [
        "00_layer1.0.bn1.png",
        "01_layer1.0.relu.png",
        "02_layer1.0.relu_2.png",
    ]


@pytest.mark.slow
def test_one_bad_image_among_good_ones_exits_3(tmp_path: Path, image_file: Path) -> None:
    bad = tmp_path / "in" / "broken.jpg"
    bad.write_text("not a jpeg")
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["run", "resnet18", str(image_file), str(bad), "-l", "fc", "-w", "none", "-o", str(out)],
    )
    assert result.exit_code == 3, result.output
    assert "broken.jpg" in result.stderr and "Traceback" not in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["images"]["ok"], manifest["images"]["failed"]) == (1, 1)
    statuses = {Path(i["path"]).name: i["status"] for i in run_images(out)}
    assert statuses == {"dog.png": "ok", "broken.jpg": "failed"}
    assert not (out / "broken").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run", "resnet-18", "IMG"], 2, "did you mean resnet18"),
        (["run", "resnet18", "IMG", "-l", "conv9"], 2, "actviz list-layers resnet18"),
        (["run", "resnet18", "IMG", "-w", "IMAGENET9K"], 2, "IMAGENET1K_V1"),
        (["run", "resnet18", "IMG", "-w", "default"], 1, "could not be downloaded"),
        (["run", "resnet18", "IMG", "-d", "cuda:7"], 1, "--device"),
        (["run", "resnet18", "MISSING"], 1, "no such file or folder"),
        (["run", "resnet18", "BROKEN"], 1, "no image could be read"),
        (["run", "resnet18", "IMG", "-o", "AFILE"], 1, "is a file"),
        (["list-layers", "resnet18", "-l", "nothing"], 2, "no layer of resnet18 matches"),
        (["list-layers", "vgg99"], 2, "did you mean"),
        (["run", "resnet18", "IMG", "--resume", "--overwrite"], 2, "choose one"),
    ],
)
def test_errors_are_one_line_with_the_documented_code(
    tmp_path: Path, image_file: Path, args: list[str], code: int, message: str
) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"")
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    out = tmp_path / "out"
    subs = {
        "IMG": str(image_file),
        "MISSING": str(tmp_path / "nope.jpg"),
        "BROKEN": str(broken),
        "AFILE": str(a_file),
    }
    argv = [subs.get(a, a) for a in args]
    if argv[0] == "run" and "-o" not in argv:
        argv += ["-o", str(out)]
    result = runner.invoke(app, argv)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    if argv[0] == "run" and "AFILE" not in args:
        # A run that failed early leaves no empty folder behind, and one whose every image
        # failed leaves none of the folder it made (nor says it wrote anything).
        assert not out.exists()
        assert "wrote" not in result.output


def test_debug_shows_the_traceback() -> None:
    result = runner.invoke(app, ["--debug", "list-layers", "vgg99"])
    assert result.exit_code == 2  # a usage error's code, with or without --debug
    assert "Traceback (most recent call last)" in result.stderr
    assert "actviz.errors.UnknownModelError: unknown model 'vgg99'" in result.stderr


def test_list_layers_marks_the_selection(tmp_path: Path) -> None:
    result = runner.invoke(app, ["list-layers", "resnet34", "--layers", "conv", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    selected = [row for row in data["layers"] if row["selected"]]
    assert len(selected) == 36 and data["grids"] == 36
    rows = {row["name"]: row for row in data["layers"]}
    assert rows["layer1.0.relu"]["calls"] == 2
    assert rows["layer4.2.conv2"]["shape"] == [1, 512, 7, 7]
    assert rows["fc"]["params"] == 513000
    names = [row["name"] for row in data["layers"]]
    assert names.index("conv1") < names.index("layer1.0.conv1") < names.index("fc")

    table = runner.invoke(app, ["list-layers", "resnet18", "-l", "layer4.*"])
    assert table.exit_code == 0
    assert "would write" in table.stdout and "layer4.1.conv2" in table.stdout


def test_models_command() -> None:
    result = runner.invoke(app, ["models", "resnet*"])
    assert result.exit_code == 0
    assert result.stdout.split() == [
        "resnet101",
        "resnet152",
        "resnet18",
        "resnet34",
        "resnet50",
    ]
    assert runner.invoke(app, ["models", "nothing-like-this"]).exit_code == 1


def test_help_and_import_do_not_import_torch() -> None:
    code = (
        "import sys, actviz, actviz.cli\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(actviz.cli.app, ['--help'])\n"
        "assert r.exit_code == 0 and 'list-layers' in r.stdout, r.output\n"
        "r = CliRunner().invoke(actviz.cli.app, ['run', '--help'])\n"
        "assert r.exit_code == 0 and '--layers' in r.stdout, r.output\n"
        "print(sorted(m for m in ('torch', 'torchvision', 'matplotlib') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert done.stdout.strip() == "[]"


def test_python_dash_m_and_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "actviz", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("actviz ")


@pytest.mark.slow
def test_sample_image_names_with_markup_characters(tmp_path: Path) -> None:
    odd = make_image(tmp_path / "in" / "[bold]x y.png")
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["run", "resnet18", str(odd), "-l", "fc", "-w", "none", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "[bold]x y.png" in result.stdout
    grids = [p.relative_to(out).as_posix() for p in out.rglob("[0-9]*_*.png")]
    assert grids == ["bold_x_y/00_fc.png"]


_FACTORY = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, chans: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(chans, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).mean((2, 3)))


def build():
    return Net()


def grey_and_stubborn():
    # Reads a tensor back while building and adds a CPU tensor in forward: neither works
    # on the meta device, so listing falls back to a real forward on zeros.
    model = Net(chans=int(torch.tensor(1).item()))
    model.forward = lambda x: model.head(model.act(model.conv(x)).mean((2, 3)) + torch.ones(1))
    return model
"""


def test_list_layers_of_a_factory_file(tmp_path: Path) -> None:
    factory = tmp_path / "nets" / "tiny.py"
    factory.parent.mkdir()
    factory.write_text(_FACTORY)
    result = runner.invoke(app, ["list-layers", f"{factory}:build", "-l", "conv", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["input_shape"] == [1, 3, 224, 224]
    rows = {row["name"]: row for row in data["layers"]}
    assert list(rows) == ["conv", "act", "head"]
    assert rows["conv"]["shape"] == [1, 4, 224, 224] and rows["conv"]["selected"]
    assert rows["head"]["shape"] == [1, 2] and rows["head"]["params"] == 10
    assert data["grids"] == 1


def test_list_layers_of_a_factory_falls_back_to_the_cpu(tmp_path: Path) -> None:
    from actviz.errors import ModelError
    from actviz.models.listing import list_layers

    factory = tmp_path / "tiny.py"
    factory.write_text(_FACTORY)
    spec = f"{factory}:grey_and_stubborn"
    listing = list_layers(spec, input_size=(20, 30), in_chans=1)
    assert listing.input_shape == (1, 1, 20, 30)
    assert [(row.name, row.shape) for row in listing.layers] == [
        ("conv", (1, 4, 20, 30)),
        ("act", (1, 4, 20, 30)),
        ("head", (1, 2)),
    ]
    with pytest.raises(ModelError) as info:  # three channels into a greyscale model
        list_layers(spec)
    message = str(info.value)
    assert message.startswith(f"cannot run {spec} on a zero input of shape (1, 3, 224, 224)")
    assert "in_chans" in message and "\n" not in message


@pytest.mark.parametrize(
    "model", ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "regnet_y_400mf"]
)
def test_list_layers_builds_without_downloads(model: str) -> None:
    # Segmentation builders fetch an ImageNet backbone unless told not to; regnet computes
    # its widths with tensors, which the meta device cannot read back.
    result = runner.invoke(app, ["list-layers", model, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {row["name"]: row for row in data["layers"]}
    if model == "regnet_y_400mf":
        assert data["input_shape"] == [1, 3, 224, 224] and rows["fc"]["shape"] == [1, 1000]
    else:
        assert data["input_shape"] == [1, 3, 520, 520]
        side = 65 if model == "fcn_resnet50" else 33  # output stride 8, or 16 for MobileNet
        assert rows["classifier"]["shape"] == [1, 21, side, side]
        assert rows["backbone"]["calls"] == 1


def test_list_layers_turns_a_failing_build_into_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.models import _api

    def broken(*, weights: object = None) -> object:
        raise RuntimeError("first line\nsecond line")

    monkeypatch.setitem(_api.BUILTIN_MODELS, "resnet18", broken)
    result = runner.invoke(app, ["list-layers", "resnet18"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "second line" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: cannot build resnet18: first line"]


@pytest.mark.slow
def test_run_a_segmentation_model_offline(tmp_path: Path, image_file: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["run", "lraspp_mobilenet_v3_large", str(image_file), "-w", "none", "-l", "classifier.*"]
        + ["-o", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    assert "RANDOM WEIGHTS" not in result.stderr
    assert json.loads(result.stdout)["images"]["ok"] == 1
    layers = run_images(out)[0]["layers"]
    assert layers and all(x["name"].startswith("classifier.") for x in layers)
    assert len(list((out / "dog").glob("[0-9]*_*.png"))) == len(layers)


@pytest.mark.parametrize(
    ("model", "valid"), [("resnet18", "IMAGENET1K_V1"), ("FACTORY", "auto or none")]
)
def test_a_missing_checkpoint_file(
    tmp_path: Path, image_file: Path, model: str, valid: str
) -> None:
    factory = tmp_path / "tiny.py"
    factory.write_text(_FACTORY)
    model = f"{factory}:build" if model == "FACTORY" else model
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", model, str(image_file), "-w", "missing.pt", "-o", str(out)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith("error: checkpoint file not found: missing.pt; check the path")
    assert valid in errors[0] and "unknown weights" not in errors[0]
    assert not out.exists() or not list(out.rglob("*.png"))


def test_garbage_checkpoint_is_reported_as_corrupt(tmp_path: Path, image_file: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"garbage")
    result = runner.invoke(
        app, ["run", "resnet18", str(image_file), "-w", str(garbage), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 1, result.output
    assert f"corrupt or unsupported checkpoint {garbage}" in result.stderr
    assert "--trust-checkpoint" not in result.stderr


def test_models_lists_segmentation_models_too() -> None:
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    names = result.stdout.split()
    assert "resnet18" in names and "fcn_resnet50" in names and "lraspp_mobilenet_v3_large" in names
    assert "fasterrcnn_resnet50_fpn" in names and "quantized_resnet18" in names
    everything = runner.invoke(app, ["models", "--all"]).stdout.split()
    assert "raft_small" in everything and "fcn_resnet50" in everything


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "resnet18", "x.jpg", "--norm", "foo"], "Invalid value for '--norm'"),
        (["run", "resnet18", "x.jpg", "--channels", "-1"], "'--channels'"),
        (["run", "resnet18", "x.jpg", "--batch-size", "0"], "'--batch-size'"),
        (["run", "resnet18", "x.jpg", "--bogus"], "No such option: --bogus"),
        (["run"], "Missing argument"),
        (["bogus"], "No such command 'bogus'"),
    ],
)
def test_parser_errors_are_one_line_with_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "actviz", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "--help" in lines[0]  # where to look next
    assert not done.stdout


def test_help_keeps_its_panels_and_no_arguments_shows_it() -> None:
    for args in (["run", "--help"], []):
        done = subprocess.run(
            [sys.executable, "-m", "actviz", *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "COLUMNS": "120"},
        )
        assert done.returncode == 0, done.stderr
        assert "Usage: actviz" in done.stdout
    assert "─ Grid ─" in done.stdout or "Commands" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "suffix"),
    [(["--save-tensors"], ".npy"), (["--tensor-format", "safetensors"], ".safetensors")],
)
def test_save_tensors_is_a_flag(
    tmp_path: Path, image_file: Path, flags: list[str], suffix: str
) -> None:
    out = tmp_path / "out"
    # The flag must not swallow the next argument: the input comes after it.
    argv = ["run", "resnet18", *flags, str(image_file), "-l", "layer4.1.conv2"]
    result = runner.invoke(app, [*argv, "--weights", "none", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 1 grid for 1 image(s)" in result.stdout
    saved = sorted((out / "dog").glob(f"*{suffix}"))
    assert [p.name for p in saved] == [f"00_layer4.1.conv2{suffix}"]
    if suffix == ".npy":
        assert np.load(saved[0]).shape == (512, 7, 7)
    else:
        from safetensors.numpy import load_file

        assert next(iter(load_file(saved[0]).values())).shape == (512, 7, 7)


def test_runs_in_a_row_without_out_each_get_a_folder_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tiny.py").write_text(_FACTORY)
    make_image(tmp_path / "a.png", (20, 16))
    make_image(tmp_path / "b.png", (20, 16))
    monkeypatch.chdir(tmp_path)
    first = runner.invoke(app, ["run", "tiny.py:build", "a.png", "--no-report"])
    assert first.exit_code == 0, first.output
    assert "writing to" not in first.stderr
    second = runner.invoke(app, ["run", "tiny.py:build", "b.png", "--no-report"])
    assert second.exit_code == 0, second.output
    assert "actviz-out holds an earlier run's files; writing to actviz-out-2" in second.stderr
    # Neither run lost the other's files.
    assert [p.name for p in (tmp_path / "actviz-out").iterdir() if p.is_dir()] == ["a"]
    assert [p.name for p in (tmp_path / "actviz-out-2").iterdir() if p.is_dir()] == ["b"]
    assert (tmp_path / "actviz-out" / "a" / "00_conv.png").is_file()
    # --resume (or --overwrite) without --out goes on in actviz-out itself.
    again = runner.invoke(app, ["run", "tiny.py:build", "a.png", "--no-report", "--resume"])
    assert again.exit_code == 0, again.output
    assert "writing to" not in again.stderr
    assert not (tmp_path / "actviz-out-3").exists()
    # diff has no --resume: its note about the next folder does not offer one.
    diffs = [runner.invoke(app, ["diff", "tiny.py:build", "a.png", "b.png"]) for _ in range(2)]
    assert [d.exit_code for d in diffs] == [0, 0], diffs[1].output
    said = " ".join(diffs[1].stderr.split())
    assert "writing to actviz-diff-2 (--out chooses the folder)" in said and "--resume" not in said


def test_optimizes_in_a_row_without_out_go_beside_a_run_then_to_a_folder_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tiny.py").write_text(_FACTORY)
    make_image(tmp_path / "a.png", (20, 16))
    monkeypatch.chdir(tmp_path)
    argv = ["optimize", "tiny.py:build", "-l", "conv", "-c", "0-1", "--steps", "2", "--size", "16"]
    assert runner.invoke(app, ["run", "tiny.py:build", "a.png", "--no-report"]).exit_code == 0
    # Beside the run: its pages and the optimize page link each other.
    first = runner.invoke(app, argv)
    assert first.exit_code == 0, first.output
    assert "writing to" not in first.stderr
    out = tmp_path / "actviz-out"
    assert (out / "a" / "00_conv.png").is_file()
    kept = (out / "optimize.json").read_bytes()
    assert [c["channel"] for c in json.loads(kept)["layers"][0]["channels"]] == [0, 1]
    # A second optimize neither fails nor replaces the first.
    second = runner.invoke(app, [*argv, "-c", "2-3", "--seed", "1"])
    assert second.exit_code == 0, second.output
    said = " ".join(second.stderr.split())
    assert "actviz-out holds an earlier optimize's results; writing to actviz-out-2" in said
    assert "--resume" not in said
    assert (out / "optimize.json").read_bytes() == kept
    doc = json.loads((tmp_path / "actviz-out-2" / "optimize.json").read_text())
    assert [c["channel"] for c in doc["layers"][0]["channels"]] == [2, 3]
    assert doc["settings"]["seed"] == 1
    # --overwrite without --out replaces the first, in actviz-out itself.
    again = runner.invoke(app, [*argv, "-c", "3", "--overwrite"])
    assert again.exit_code == 0, again.output
    assert "writing to" not in again.stderr
    assert not (tmp_path / "actviz-out-3").exists()
    channels = json.loads((out / "optimize.json").read_text())["layers"][0]["channels"]
    assert [c["channel"] for c in channels] == [3]


def test_rates_below_one_a_second_keep_two_digits() -> None:
    from actviz.cli.console import rate_words

    assert rate_words(1, 32.2) == "0.031 images/s"  # not 0.0
    assert rate_words(25, 2.0, "clips") == "12.5 clips/s"
    assert rate_words(3, 0.0) == "0 images/s"


def test_a_piped_slow_command_says_its_pace_and_time_left(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time
    from types import SimpleNamespace

    from actviz.cli.console import PacedReporter

    # One line after the first image, then at each tenth or once 30 s passed since the last.
    clock = iter([0.0, 20.0, 40.0, 45.0, 50.0, 90.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    reporter = PacedReporter(quiet=False, status={}, every=30.0)
    reporter.start(20)
    image = SimpleNamespace(status="ok", layers=[], path=Path("a.png"))
    for _ in range(5):
        reporter.advance(image)  # type: ignore[arg-type]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "actviz: 1 of 20 images, 20 s each, about 6 min left",  # the first image
        "actviz: 2 of 20 images, 20 s each, about 6 min left",  # a tenth
        "actviz: 4 of 20 images, 12 s each, about 3 min left",  # two tenths
        "actviz: 5 of 20 images, 18 s each, about 4 min left",  # 40 s since the last line
    ]
    # Quiet, or a run expected to take less than `every`: nothing.
    for quiet, total, seconds in ((True, 2, 100.0), (False, 20, 1.0)):
        clock = iter([0.0, seconds])
        reporter = PacedReporter(quiet=quiet, status={}, every=30.0)
        reporter.start(total)
        reporter.advance(image)  # type: ignore[arg-type]
        assert capsys.readouterr().err == ""


def test_a_resumed_slow_command_says_what_it_does_first_and_paces_only_new_images(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the first image (which may take minutes) a line says what the command does;
    the images an earlier run did count neither in the pace nor in the time left."""
    import time
    from types import SimpleNamespace

    from actviz.cli.cam_eval import _Reporter
    from actviz.command.progress import start_progress

    clock = iter([0.0, 0.0, 60.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    reporter = _Reporter(quiet=False, status={}, every=30.0)
    image = SimpleNamespace(status="ok", layers=[], path=Path("a.png"))
    start_progress(reporter, 10, [image] * 8)  # 8 reused from the earlier run
    assert capsys.readouterr().err.splitlines() == [
        "cam-eval: scoring 2 images (8 done by the earlier run); the pace follows the first"
    ]
    reporter.advance(image)  # type: ignore[arg-type]
    # 60 s for the one image scored now (not 60 s over 9), one image left.
    assert capsys.readouterr().err.splitlines() == [
        "cam-eval: 9 of 10 images, 60 s each, about 60 s left"
    ]


def test_a_piped_run_says_its_pace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """run piped to a file was silent until its summary, however long it took."""
    from actviz.cli import commands

    monkeypatch.setattr(commands._RunReporter, "__init__", _every_second(commands._RunReporter))
    for i in range(3):
        make_image(tmp_path / "in" / f"{i}.png", seed=i)
    argv = ["run", "resnet18", str(tmp_path / "in"), "-w", "none", "-o", str(tmp_path / "o")]
    result = runner.invoke(app, [*argv, "-l", "layer1", "--input-size", "32,32", "--no-report"])
    assert result.exit_code == 0, result.output
    paced = [line for line in result.stderr.splitlines() if line.startswith("run: ")]
    assert paced and paced[0].startswith("run: 1 of 3 images, "), result.stderr


def _every_second(kind: type) -> Any:
    """``kind.__init__`` with ``every`` zero: every run is slow enough to pace."""
    init = kind.__init__

    def patched(self: Any, *, quiet: bool, status: dict[str, Any]) -> None:
        init(self, quiet=quiet, status=status, every=0.0)

    return patched


def test_the_summary_counts_a_reused_modules_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "twice.py").write_text(
        "from torch import nn\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b, self.act = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3), nn.ReLU()\n\n"
        "    def forward(self, x):\n"
        "        return self.act(self.b(self.act(self.a(x))))\n\n"
        "def build():\n"
        "    return Net()\n"
    )
    make_image(tmp_path / "a.png", (20, 16))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "twice.py:build", "a.png", "-l", "act", "--no-report"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "1 selected by 'act'; 2 outputs an image (a module called twice gives two)" in said
    assert "wrote 2 grids for 1 image(s)" in result.stdout
    once = runner.invoke(app, ["run", "twice.py:build", "a.png", "-l", "a", "--no-report"])
    assert "1 selected by 'a'" in once.stderr and "outputs an image" not in once.stderr
