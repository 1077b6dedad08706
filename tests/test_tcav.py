"""`actviz tcav`: FastCAV's closed form, the two-sided test against exact enumeration, the
scores against captum's TCAV given the same vectors, the known answer on the planted model (its
class 0 is the mean of a red detector), the saved vectors, --resume, and every bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import actviz
from actviz.cli import app
from actviz.tcav import fast_cav, linear_cav, tcav_scores, two_sided_test
from tests.concept_data import write_factory, write_squares


def test_fast_cav_is_its_closed_form_and_points_like_a_linear_svm() -> None:
    rng = np.random.default_rng(0)
    pos = rng.normal(size=(30, 6)) + np.array([2.0, 0, 0, 0, 0, 0])
    neg = rng.normal(size=(40, 6))
    expected = pos.mean(axis=0) - np.concatenate([pos, neg]).mean(axis=0)
    expected /= np.linalg.norm(expected)
    assert fast_cav(pos, neg) == pytest.approx(expected, abs=1e-12)
    svm = linear_cav(pos, neg, seed=0)
    assert np.linalg.norm(svm) == pytest.approx(1.0) and svm @ expected > 0.6


def test_the_two_sided_test_against_exact_enumeration() -> None:
    a = np.array([0.9, 0.8, 1.0, 0.7])
    b = np.array([0.5, 0.6, 0.4, 0.8])
    pooled = np.concatenate([a, b])
    observed = abs(a.mean() - b.mean())
    splits = list(itertools.combinations(range(8), 4))
    exact = np.mean(
        [
            abs(pooled[list(s)].mean() - np.delete(pooled, list(s)).mean()) >= observed - 1e-12
            for s in splits
        ]
    )
    assert two_sided_test(a, b, seed=0) == pytest.approx(exact, abs=0.01)
    assert two_sided_test(b, a, seed=0) == pytest.approx(exact, abs=0.01)  # two-sided
    assert two_sided_test(a, a, seed=0) == 1.0
    # No spread at all, apart: told apart (a t-test has no answer there).
    assert two_sided_test(np.ones(20), np.full(20, 0.5), seed=0) < 1e-3


def test_scores_equal_captum_given_the_same_vectors(tmp_path: Path) -> None:
    import torch
    from captum.concept import TCAV, Concept
    from captum.concept._utils.classifier import Classifier
    from torch import nn

    from actviz.gradients import compute_gradients

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 6, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 4),
    ).eval()
    x = torch.randn(24, 3, 12, 12)
    vectors = torch.nn.functional.normalize(torch.randn(5, 6), dim=1)  # (runs, channels)
    # Ours: the gradient summed over positions, dotted with each vector.
    grads = compute_gradients(model, x, ["1"], target=[2] * 24).captures["1"].gradient
    mine, magnitude = tcav_scores(grads.sum(dim=(2, 3)).numpy(), vectors.numpy())
    assert ((mine > 0) & (mine < 1)).any()  # images disagree: a real comparison

    class Given(Classifier):  # type: ignore[misc]
        def __init__(self, weights: torch.Tensor) -> None:
            self._weights = weights

        def train_and_eval(self, dataloader: object, **kwargs: object) -> dict[str, object]:
            return {"accs": torch.tensor(1.0)}

        def weights(self) -> torch.Tensor:
            return self._weights

        def classes(self) -> list[int]:
            return [0, 1]

    data = [torch.randn(4, 3, 12, 12)]  # one batch of inputs per concept
    for run, v in enumerate(vectors):
        # The same vector in captum's flattened (C, H, W) space: the value of its channel at
        # every position.
        flat = v[:, None, None].expand(6, 12, 12).reshape(-1)
        tcav = TCAV(
            model,
            layers=["1"],
            model_id=f"m{run}",
            classifier=Given(torch.stack([flat, -flat])),
            save_path=str(tmp_path / "cav"),
        )
        concepts = [Concept(0, "c", iter(data)), Concept(1, "r", iter(data))]
        result = tcav.interpret(inputs=x, experimental_sets=[concepts], target=2)
        scores = result["0-1"]["1"]
        assert float(scores["sign_count"][0]) == pytest.approx(mine[run], abs=1e-6)
        assert float(scores["magnitude"][0]) == pytest.approx(magnitude[run], rel=1e-5, abs=1e-7)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tcav")
    write_squares(root / "red", 12, seed=1, share=1.0, colours=("red",))
    write_squares(root / "random", 40, seed=2, share=0.3)
    return {
        "model": write_factory(root),
        **{name: str(root / name) for name in ("red", "random")},
    }


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["tcav", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_known_answer_red_moves_class_0_and_a_random_concept_does_not(
    folders: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        folders["model"],
        folders["random"],
        "--layer",
        "1",
        "--input-size",
        "32,32",
        "--concept",
        f"red={folders['red']}",
        "--concept",
        f"other={folders['random']}",  # a random folder as a concept: a draw of it each run
        "--random",
        folders["random"],
        "--target",
        "0",
        "--runs",
        "50",
        "-o",
        str(out),
    )
    assert code == 0, stdout + stderr
    record = json.loads((out / "tcav.json").read_text())
    assert record["command"] == "tcav" and record["layer"] == "1" and record["space"] == "channel"
    scores = {s["concept"]: s for s in record["scores"]}
    red, other = scores["red"], scores["other"]
    # The class is the mean of the red detector: every red vector raises it, in every run.
    assert red["scores"] == [1.0] * 50 and red["score"] == 1.0
    assert red["p"] < 0.01 and red["significant"] is True
    # Random vectors, and a random folder as a concept: either sign, about half the runs.
    assert 0.3 <= red["random"] <= 0.7
    assert 0.3 <= other["score"] <= 0.7 and other["significant"] is False
    assert record["protocol"]["runs"] == 50 and record["cav"] == "fast"
    # The vectors: a unit vector per concept, channel 0 (the red detector) first.
    vector = np.load(out / "cavs" / "red.npy")
    assert vector.shape == (8,) and vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6) and np.argmax(vector) == 0
    # What ablate --direction reads: the same vector, of the layer's channel length.
    from actviz.ablate.targets import load_direction

    assert load_direction(out / "cavs" / "red.npy", 8, "1").numpy() == pytest.approx(vector)
    from safetensors import safe_open

    with safe_open(str(out / "cavs" / "cavs.safetensors"), framework="np") as fh:
        assert set(fh.keys()) == {
            "red",
            "red.runs",
            "red.random",
            "other",
            "other.runs",
            "other.random",
        }
        assert fh.get_tensor("red.runs").shape == (50, 8)
        assert json.loads(fh.metadata()["actviz"])["layer"] == "1"
    assert "red" in stdout and "yes" in stdout
    page = (out / "tcav.html").read_text()
    assert "raises the class" in page and "cavs/red.npy" in page
    assert (out / "tcav.png").stat().st_size > 5000
    # --resume reads every vector back: nothing computed again, the same scores.
    code, stdout, stderr = _invoke(
        folders["model"],
        folders["random"],
        "-l",
        "1",
        "--input-size",
        "32,32",
        "--concept",
        f"red={folders['red']}",
        "--concept",
        f"other={folders['random']}",
        "--random",
        folders["random"],
        "--target",
        "0",
        "--runs",
        "50",
        "-o",
        str(out),
        "--resume",
    )
    assert code == 0, stdout + stderr
    again = json.loads((out / "tcav.json").read_text())
    # Every vector read back: the concept's 12, the random folder's 40 (as a concept and as
    # the random images) and the 40 class images' gradients.
    assert again["scores"] == record["scores"] and again["images"]["reused"] == 12 + 40 + 40 + 40
    # Other settings: refused before anything is written, naming what changed.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    code, stdout, stderr = _invoke(
        folders["model"], folders["random"], "-l", "1", "--input-size", "32,32",
        "--concept", f"red={folders['red']}", "--random", folders["random"],
        "--target", "1", "--runs", "50", "-o", str(out), "--resume",
    )  # fmt: skip
    assert code == 2 and f"--resume: {out} was written with " in stderr, stdout + stderr
    assert "(now [1])" in stderr and stderr.count("\n") == 1, stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_linear_vectors_agree_with_fast_ones(folders: dict[str, str], tmp_path: Path) -> None:
    common: dict[str, object] = {
        "layers": "1",
        "concepts": {"red": folders["red"]},
        "random": [folders["random"]],
        "targets": ["0"],
        "input_size": (32, 32),
        "runs": 5,
        "report": False,
    }
    fast = actviz.tcav(folders["model"], folders["random"], out=tmp_path / "f", **common)
    linear = actviz.tcav(
        folders["model"], folders["random"], out=tmp_path / "l", cav="linear", **common
    )
    assert linear.scores[0]["score"] == pytest.approx(fast.scores[0]["score"], abs=0.05)
    assert "TCAV" in fast._repr_html_() and "red" in fast._repr_html_()
    assert fast.vector("red") == tmp_path / "f" / "cavs" / "red.npy"


def test_bad_inputs_exit_2_and_write_nothing(folders: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = [folders["model"], folders["random"], "-l", "1", "--input-size", "32,32", "-o", str(out)]
    good = ["--concept", f"red={folders['red']}", "--random", folders["random"]]

    def refused(*args: str) -> str:
        code, stdout, stderr = _invoke(*base, *args)
        assert code == 2, stdout + stderr
        assert not out.exists()
        return " ".join(stderr.split())

    assert "this model has no class names, so target 'zebra'" in refused(*good, "--target", "zebra")
    assert "not top1" in refused(*good, "--target", "top1")
    assert "out of range for a model with 3 classes" in refused(*good, "--target", "7")
    few = tmp_path / "few"
    write_squares(few, 3, seed=4)
    assert "a concept vector needs at least 5" in refused(
        "--concept", f"few={few}", "--random", folders["random"], "--target", "0"
    )
    assert "at least 10 are needed" in refused(
        "--concept", f"red={folders['red']}", "--random", str(few), "--target", "0"
    )
    assert "NAME=DIR" in refused(
        "--concept", folders["red"], "--random", folders["random"], "--target", "0"
    )
    assert "no such file or folder" in refused(
        "--concept", f"red={tmp_path / 'nowhere'}", "--random", folders["random"], "--target", "0"
    )
    code, stdout, stderr = _invoke(
        folders["model"], "-l", "1", "--input-size", "32,32", "-o", str(out), *good, "--target", "0"
    )
    assert code == 2 and "has no images" in stderr and not out.exists()
    code, stdout, stderr = _invoke(
        folders["model"],
        folders["random"],
        "--input-size",
        "32,32",
        "-o",
        str(out),
        *good,
        "--target",
        "0",
        "-l",
        "0,1",
    )
    assert code == 2 and "one layer" in " ".join(stderr.split()) and not out.exists()


@pytest.mark.slow
def test_random_weights_are_said_everywhere(folders: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        "resnet18",
        folders["red"],
        "-l",
        "layer4",
        "--input-size",
        "32,32",
        "--concept",
        f"red={folders['red']}",
        "--random",
        folders["random"],
        "--target",
        "1",
        "--runs",
        "3",
        "-b",
        "64",
        "-o",
        str(out),
    )
    assert code == 0, stdout + stderr
    record = json.loads((out / "tcav.json").read_text())
    assert record["random_weights"] is True and "RANDOM WEIGHTS" in record["weights"]["warning"]
    assert "RANDOM WEIGHTS: these scores describe an untrained model" in stdout
    assert (
        "RANDOM WEIGHTS: these scores describe an untrained network"
        in (out / "tcav.html").read_text()
    )
    assert np.load(out / "cavs" / "red.npy").shape == (512,)
    from actviz.tcav.result import TcavResult

    result = TcavResult(
        model="resnet18",
        out=out,
        record=out / "tcav.json",
        layer="layer4",
        cav="fast",
        runs=3,
        seed=0,
        concepts=record["concepts"],
        scores=record["scores"],
        vectors=out / "cavs" / "cavs.safetensors",
        images=12,
        random_weights=True,
        weights=None,
    )
    assert "random weights: these scores describe an untrained model" in result._repr_html_()
