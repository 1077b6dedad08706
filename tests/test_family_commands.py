"""Every command on every family: it handles the family's models or refuses them in one line
(exit 2), before any work and without leaving an output folder behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from actviz.models.families import DETECTION, OPTICAL_FLOW, QUANTIZED, VIDEO
from tests.conftest import make_image
from tests.test_optical_flow import TINY_FLOW
from tests.test_quantized import _FACTORY as QUANTIZED_NET
from tests.test_video import NET as VIDEO_NET
from tests.test_video import write_gif

#: (family, command) pairs that make no sense, each refused by the family's row.
REFUSED = [
    (VIDEO, "diff"),
    (VIDEO, "sae"),
    (VIDEO, "tcav"),
    (VIDEO, "cam-eval"),
    (VIDEO, "atlas"),
    (OPTICAL_FLOW, "diff"),
    (OPTICAL_FLOW, "sae"),
    (OPTICAL_FLOW, "tcav"),
    (OPTICAL_FLOW, "cam-eval"),
    (OPTICAL_FLOW, "atlas"),
    (DETECTION, "cam-eval"),
    (QUANTIZED, "cam-eval"),
]


@pytest.mark.parametrize(("family", "command"), REFUSED, ids=lambda v: getattr(v, "key", v))
def test_the_familys_row_refuses_the_command(family: object, command: str) -> None:
    why = family.refusal(command)  # type: ignore[attr-defined]
    assert why is not None and "\n" not in why
    assert "backbone" not in why  # a detector is not "a backbone without a classifier"


def _factory(tmp_path: Path, source: str, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return f"{path}:build"


@pytest.mark.parametrize(
    ("net", "command", "says"),
    [
        ("video", "diff", "diff does not take"),
        ("video", "sae", "a video model takes clips"),
        ("video", "cam-eval", "a video model takes clips: draw their maps with actviz run --cam"),
        ("flow", "diff", "a flow model takes pairs"),
        ("flow", "sae", "a flow model takes pairs"),
        ("flow", "atlas", "a flow model takes pairs"),
        ("video", "atlas", "a video model takes clips"),
        ("quantized", "cam-eval", "use the float model"),
    ],
)
def test_a_command_refuses_a_family_in_one_line_before_any_work(
    tmp_path: Path, net: str, command: str, says: str
) -> None:
    source = {"video": VIDEO_NET, "flow": TINY_FLOW, "quantized": QUANTIZED_NET}[net]
    model = _factory(tmp_path, source, f"{net}net")
    if net == "video":
        inputs = [write_gif(tmp_path / "in" / f"{s}.gif", frames=4) for s in "ab"]
    else:
        inputs = [make_image(tmp_path / "in" / f"{s}.png", size=(40, 32)) for s in "ab"]
    out = tmp_path / "out"
    argv = [command, model, *map(str, inputs), "-o", str(out), "-w", "none"]
    # atlas: its one layer, and enough points from two inputs for its map
    needs = ["-l", "encoder", "--reduce", "pca", "--points", "spatial:4"]
    needs = needs if command == "atlas" else []
    result = CliRunner().invoke(app, [*argv, *needs, "--input-size", "32,32"])
    assert result.exit_code == 2, result.output
    assert f"{command} does not take" in result.output and says in result.output
    assert "Traceback" not in result.output and "--input-size" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_pca_of_a_video_model_says_video_layers_are_not_coloured_yet(tmp_path: Path) -> None:
    model = _factory(tmp_path, VIDEO_NET, "videonet")
    clip = write_gif(tmp_path / "in" / "a.gif", frames=4)
    out = tmp_path / "out"
    argv = ["run", model, str(clip), "-o", str(out), "-w", "none", "--input-size", "24,24"]
    result = CliRunner().invoke(app, [*argv, "--frames", "3", "--view", "pca", "-q"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        "error: --view pca does not colour video layers yet (0); drop --view pca to draw them "
        "as time strips"
    )
    assert not out.exists()


NAN_NET = """
import torch
from torch import nn


def build():
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)
    )
    with torch.no_grad():
        net[3].bias.fill_(float("nan"))
    return net
"""


def test_a_classifier_whose_output_is_nan_is_said_and_ranks_nothing(tmp_path: Path) -> None:
    import json

    model = _factory(tmp_path, NAN_NET, "nannet")
    for s in "ab":
        make_image(tmp_path / "in" / f"{s}.png", size=(40, 32))
    out = tmp_path / "out"
    argv = ["run", model, str(tmp_path / "in"), "-o", str(out), "-w", "none", "--no-report"]
    result = CliRunner().invoke(app, [*argv, "--input-size", "32,32", "-q"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "NaN or inf" in line]
    assert len(said) == 1 and said[0].startswith("warning: ")  # once, not per image
    assert "top-5 predictions are left out" in said[0] and "-l all" in said[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert any("NaN or inf" in w for w in manifest["warnings"])


@pytest.mark.parametrize(
    ("model", "flags", "says"),
    [
        ("resnet18", ["--score-threshold", "0.3"], "--score-threshold is for detectors"),
        ("resnet18", ["--cam", "--detection", "2"], "--detection picks a detector's detection"),
        (
            "fasterrcnn_mobilenet_v3_large_320_fpn",
            ["--cam-method", "scorecam"],
            "--cam-method scorecam does not apply to fasterrcnn_mobilenet_v3_large_320_fpn",
        ),
    ],
)
def test_options_of_another_family_are_refused_not_ignored(
    tmp_path: Path, model: str, flags: list[str], says: str
) -> None:
    image = make_image(tmp_path / "a.png", size=(40, 32))
    out = tmp_path / "out"
    argv = ["run", model, str(image), "-o", str(out), "-w", "none", "-q", *flags]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line
    assert not out.exists()


def test_the_detectors_option_defaults_are_the_run_options_defaults() -> None:
    from actviz.run.families import RUN_FAMILIES
    from actviz.run.options import RunOptions

    defaults = RunOptions()
    for row in RUN_FAMILIES:
        for option in row.options:
            if option.default is not None:  # a classifier given the default is left be
                assert getattr(defaults, option.name) == option.default, option.name


def test_a_detectors_logits_are_neither_dead_nor_vanishing() -> None:
    """Scores are not a signal path: a negative logit is not a dead unit, and a logit's
    scale against the FPN's is not a shrinking signal; NaN in them is still flagged."""
    import torch

    from actviz.statistics import Thresholds, flag_anomalies
    from actviz.statistics.compute import compute_stats
    from actviz.statistics.layerstats import LayerStats

    def stats(values: list[float], channels: int = 2) -> LayerStats:
        (one,) = compute_stats(torch.tensor(values).reshape(1, channels, -1, 1))
        return one

    fpn = ("backbone.fpn[pool]", stats([10.0, 20.0, 30.0, 40.0]))
    logits = ("rpn.head.cls_logits:2", stats([-0.5, -0.25, -0.75, -0.1]))
    plain = flag_anomalies([fpn, logits])
    assert {f.kind for f in plain} == {"dead", "vanishing"}  # as a signal, it would be
    read = flag_anomalies([fpn, logits], Thresholds(readouts=("rpn.head.cls_logits",)))
    assert read == []
    broken = ("rpn.head.cls_logits", stats([float("nan"), 1.0, 2.0, 3.0]))
    kinds = [f.kind for f in flag_anomalies([fpn, broken], Thresholds(readouts=(broken[0],)))]
    assert kinds == ["nan"]


def test_a_detector_runs_thresholds_name_its_readouts(tmp_path: Path) -> None:
    import json

    image = make_image(tmp_path / "a.png", size=(64, 48))
    out = tmp_path / "out"
    model = "fasterrcnn_mobilenet_v3_large_320_fpn"
    argv = ["run", model, str(image), "-o", str(out), "-w", "none", "-q", "--no-report"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    assert stats["thresholds"]["readouts"] == ["rpn.head.cls_logits"]
    flagged = {flag["layer"] for flag in stats["flags"]["layers"]}
    assert not any(layer.startswith("rpn.head.cls_logits") for layer in flagged)
    assert DETECTION.readouts_among(["backbone.fpn", "roi_heads.box_predictor.cls_score"]) == (
        "roi_heads.box_predictor.cls_score",
    )


@pytest.mark.slow
def test_a_detectors_top_images_advice_is_what_helps_a_detector(tmp_path: Path) -> None:
    """A detector keeps each image's aspect ratio whatever --input-size says: the warning
    about maps of several sizes says so instead of advising --input-size."""
    make_image(tmp_path / "in" / "wide.png", size=(96, 32))
    make_image(tmp_path / "in" / "tall.png", size=(32, 96))
    argv = ["top-images", "fasterrcnn_mobilenet_v3_large_320_fpn", str(tmp_path / "in")]
    flags = ["-o", str(tmp_path / "out"), "-w", "none", "-k", "1", "-l", "backbone.body.12"]
    flags += ["--input-size", "64,64"]  # the detector's min_size: small and fast
    result = CliRunner().invoke(app, [*argv, *flags, "--no-report"])
    assert result.exit_code == 0, result.output
    (said,) = [line for line in result.stderr.splitlines() if "another size" in line]
    assert said.endswith(
        "a detector resizes each image itself, keeping its aspect ratio, whatever "
        "--input-size says: images of one aspect ratio give maps of one size"
    )
    assert "pass --input-size" not in result.stderr


def test_a_video_models_uncoloured_layers_are_said_in_one_line() -> None:
    from actviz.run.pca import CLIP_NOTE, pca_warnings

    notes = {f"layer{i}": CLIP_NOTE for i in range(5)} | {"fc": "no spatial positions"}
    assert pca_warnings(notes) == [
        "--view pca: no PCA picture of fc: no spatial positions",
        "--view pca: no PCA picture of 5 video layer(s) (layer0, layer1, layer2 and 2 more): "
        f"{CLIP_NOTE}; their grids draw them as time strips",
    ]
