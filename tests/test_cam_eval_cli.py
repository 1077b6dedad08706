"""`actviz cam-eval` end to end on tiny models: the record, the sanity check's flags, bad images,
--resume, one layer only, and a ViT's tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image
from tests.test_cam_run import TINY_VIT

TINY_CNN = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, stride=2), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )
"""


def _inputs(tmp_path: Path, count: int = 3) -> Path:
    folder = tmp_path / "in"
    for i in range(count):
        make_image(folder / f"im{i}.png", size=(40, 32), seed=i)
    return folder


def _invoke(tmp_path: Path, source: str, *args: str) -> tuple[int, str, str]:
    factory = tmp_path / "net.py"
    factory.write_text(source)
    result = CliRunner().invoke(
        app, ["cam-eval", f"{factory}:build", *args, "--input-size", "32,32", "--steps", "6"]
    )
    return result.exit_code, result.stdout, result.stderr


def test_scores_baselines_sanity_and_a_bad_image(tmp_path: Path) -> None:
    folder = _inputs(tmp_path)
    (folder / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        tmp_path,
        TINY_CNN,
        str(folder),
        "-l",
        "4",
        "-m",
        "gradcam,eigencam",
        "-o",
        str(out),
        "-b",
        "2",
    )
    assert code == 3, stdout + stderr  # one image failed, the rest were scored
    assert "broken.png" in stderr
    record = json.loads((out / "cam-eval.json").read_text())
    assert record["layer"] == "4" and record["methods"] == ["gradcam", "eigencam"]
    assert record["baselines"] == ["random", "gaussian", "sobel"]
    assert record["protocol"]["steps"] == 6 and record["protocol"]["step_pixels"] == 171
    assert record["protocol"]["deletion_substrate"] == "zeros"
    assert record["protocol"]["blur_kernel"] == 11
    # The factory's own weights: not random, and nothing says so.
    assert record["random_weights"] is False and "RANDOM" not in stdout
    images = {r["image"]: r for r in record["images"]}
    assert images["broken.png"]["status"] == "failed"
    ok = [r for r in record["images"] if r["status"] == "ok"]
    assert len(ok) == 3
    for r in ok:
        scores = r["scores"]
        assert set(scores) == {"gradcam", "eigencam", "random", "gaussian", "sobel"}
        for s in scores.values():
            assert len(s["deletion"]) == len(s["insertion"]) == 7
            assert s["deletion"][0] == pytest.approx(r["probability"], rel=1e-4)
            assert 0.0 <= s["deletion_auc"] <= 1.0 and 0.0 <= s["insertion_auc"] <= 1.0
        assert np.asarray(r["maps"]["gradcam"]).shape == (8, 8)
    # Cascading randomization: the last three blocks, from the output down.
    assert record["sanity"]["blocks"] == ["8", "4", "2"]
    summary = record["summary"]
    assert summary["sobel"]["sanity"]["flagged"] is True  # never reads the weights
    assert summary["gradcam"]["sanity"]["flagged"] is False
    assert [s["block"] for s in summary["gradcam"]["sanity"]["stages"]] == ["8", "4", "2"]
    mean = summary["gradcam"]["metrics"]["deletion_auc"]
    assert mean["low"] <= mean["mean"] <= mean["high"]
    assert mean["mean"] == pytest.approx(
        np.mean([r["scores"]["gradcam"]["deletion_auc"] for r in ok])
    )
    assert set(summary["gradcam"]["beats"]) == {"random", "gaussian", "sobel"}
    # The table (piped: plain columns), the chart and the page.
    assert "Grad-CAM" in stdout and "EigenCAM" in stdout and "UNCHANGED" in stdout
    with Image.open(out / "curves.png") as chart:
        pixels = np.asarray(chart.convert("RGB"))
    assert chart.size == (1100, 440) and pixels.std() > 20
    page = (out / "cam-eval.html").read_text()
    assert "Grad-CAM" in page and "cases/gradcam_best.png" in page and "Sanity check" in page
    assert "Sobel edges" in page  # the baselines by the names the record gives them
    table = page[page.index("<h2>Methods and baselines") : page.index("</table>")]
    rows = table.split("<tr")[2:]  # after the header row: 2 methods, 3 baselines
    assert len(rows) == 5 and {row.count("<td") for row in rows} == {4 + 3 + 2}
    cases = {(c["method"], c["case"]) for c in record["cases"]}
    assert cases == {(m, c) for m in ("gradcam", "eigencam") for c in ("best", "worst")}
    for case in record["cases"]:
        assert (out / case["file"]).is_file()


def test_resume_scores_only_new_images(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    common = ["-l", "4", "-m", "layercam", "-o", str(out), "--sanity-blocks", "1"]
    code, stdout, stderr = _invoke(tmp_path, TINY_CNN, str(folder), *common)
    assert code == 0, stdout + stderr
    first = json.loads((out / "cam-eval.json").read_text())
    make_image(folder / "im9.png", size=(40, 32), seed=9)
    code, stdout, stderr = _invoke(tmp_path, TINY_CNN, str(folder), *common, "--resume")
    assert code == 0, stdout + stderr
    again = json.loads((out / "cam-eval.json").read_text())
    assert [r["image"] for r in again["images"]] == ["im0.png", "im1.png", "im9.png"]
    assert again["images"][:2] == first["images"]  # kept from the ledger, not scored again
    lines = (out / "cam-eval.jsonl").read_text().splitlines()
    assert len(lines) == 4  # settings, then one line per image scored
    assert "1 scored, 2 reused (--resume)" in stdout + stderr
    # A kill in the middle of the last line: the resume scores that image again, and so
    # does not a second resume choke on the cut line the first one ended with a line break.
    ledger = out / "cam-eval.jsonl"
    ledger.write_bytes(ledger.read_bytes()[: -len(lines[-1]) // 2])
    for scored in ("1 scored, 2 reused", "0 scored, 3 reused"):
        code, stdout, stderr = _invoke(tmp_path, TINY_CNN, str(folder), *common, "--resume")
        assert code == 0 and scored in stdout + stderr, stdout + stderr
        resumed = json.loads((out / "cam-eval.json").read_text())
        assert resumed["images"] == again["images"]
    # A folder another command wrote is not a cam-eval to resume.
    other = tmp_path / "other"
    other.mkdir()
    (other / "00_conv1.png").write_bytes(b"")
    code, stdout, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), "-l", "4", "-m", "layercam", "-o", str(other), "--resume"
    )
    assert code == 2 and "holds no cam-eval to resume" in stderr, stdout + stderr
    assert sorted(p.name for p in other.iterdir()) == ["00_conv1.png"]
    code, stdout, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), "-l", "4", "-m", "gradcam", "-o", str(out), "--resume"
    )
    assert code == 2 and f"--resume: {out} was written with methods=" in stderr, stderr
    assert '(now ["gradcam"])' in stderr


def test_one_layer_only_and_unknown_methods(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 1)
    code, _, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), "-l", "conv", "-o", str(tmp_path / "a")
    )
    assert code == 2 and "scores the maps of one layer" in stderr
    assert not (tmp_path / "a").exists()
    code, _, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), "-m", "smooth", "-o", str(tmp_path / "b")
    )
    assert code == 2 and "--methods takes one of" in stderr
    code, _, stderr = _invoke(tmp_path, TINY_CNN, str(folder), "-l", "8", "-o", f"{tmp_path}/c")
    assert code == 2 and "the output of 8 (1, 4) is not a spatial map" in stderr
    assert not (tmp_path / "c").exists()  # nothing half-written


def test_vit_tokens_with_score_cam(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        tmp_path,
        TINY_VIT,
        str(folder),
        "-m",
        "scorecam,gradcam++",
        "-o",
        str(out),
        "--sanity-blocks",
        "2",
        "--no-report",
    )
    assert code == 0, stdout + stderr
    record = json.loads((out / "cam-eval.json").read_text())
    # The default layer: the last block whose patch tokens reach the class token.
    assert record["layer"] == "encoder.layers.encoder_layer_0" and record["layout"] == "tokens"
    assert record["sanity"]["blocks"] == ["heads.head", "encoder.layers.encoder_layer_1"]
    maps = np.asarray(record["images"][0]["maps"]["scorecam"])
    assert maps.shape == (4, 4) and maps.max() == pytest.approx(1.0) and maps.min() >= 0
    assert record["report"] is None and not (out / "cam-eval.html").exists()


def test_perturbed_chunks_on_a_cpu_hold_about_400k_pixels() -> None:
    from actviz.cam_eval.evaluate import _scoring_chunk
    from actviz.cam_eval.options import CamEvalOptions

    default = CamEvalOptions(methods="gradcam")  # 8 x --batch-size
    assert _scoring_chunk(default, "cpu", (128, 128)) == 24
    assert _scoring_chunk(default, "cpu", (224, 224)) == 8
    assert _scoring_chunk(default, "cpu", (1024, 1024)) == 1
    assert _scoring_chunk(default, "cpu", (16, 16)) == default.forward_chunk
    assert _scoring_chunk(default, "cuda", (224, 224)) == default.forward_chunk
    given = CamEvalOptions(methods="gradcam", chunk=50)
    assert _scoring_chunk(given, "cpu", (224, 224)) == 50
