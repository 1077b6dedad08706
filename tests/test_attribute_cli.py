"""`actviz attribute` end to end on tiny models: the pictures, tensors and records of a folder with
a bad image, --resume, the usage errors (nothing left behind), a ViT's rollout, the warning of
too few steps, random weights said everywhere, the Python face and its card; and cam-eval
scoring attributions beside CAMs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image
from tests.test_cam_eval_cli import TINY_CNN
from tests.test_cam_run import TINY_VIT

#: A model whose class scores are cubic in the input: a one-point path integral misses a
#: quarter of F(x) - F(0), two Gauss-Legendre points are exact.
CUBE = """
import torch
from torch import nn


class Cube(nn.Module):
    def forward(self, x):
        s = (x ** 3).flatten(1).sum(1, keepdim=True) / x[0].numel()
        return torch.cat([s, 2 * s, -s], dim=1)


def build():
    return Cube()
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
        app, ["attribute", f"{factory}:build", *args, "--input-size", "32,32"]
    )
    return result.exit_code, result.stdout, result.stderr


def test_folder_pictures_tensors_axioms_and_a_bad_image(tmp_path: Path) -> None:
    folder = _inputs(tmp_path)
    (folder / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), "-m", "ig,smoothgrad", "-m", "gradxinput",
        "--steps", "48", "--samples", "3", "--save-tensors", "-b", "16", "-o", str(out),
    )  # fmt: skip
    assert code == 3, stdout + stderr  # one image failed, the rest were drawn
    assert "broken.png" in stderr
    record = json.loads((out / "attribute.json").read_text())
    assert record["methods"] == ["ig", "smoothgrad", "gradxinput"]
    assert record["signed"] == {"ig": True, "smoothgrad": False, "gradxinput": True}
    assert record["settings"]["ig"] == {
        "steps": 48,
        "integration": "gausslegendre",
        "baseline": "zero",
    }
    assert record["random_weights"] is False and "RANDOM" not in stdout
    images = {r["image"]: r for r in record["images"]}
    assert images["broken.png"]["status"] == "failed"
    ok = [r for r in record["images"] if r["status"] == "ok"]
    assert [r["image"] for r in ok] == ["im0.png", "im1.png", "im2.png"]
    for r in ok:
        assert r["folder"] == r["image"].removesuffix(".png")
        for entry in r["methods"].values():
            picture = Image.open(out / entry["picture"])
            # input, overlay and the map alone, each enlarged from 32 to 160 px, and a header.
            assert picture.width == 3 * 160 + 2 * 4 and picture.height > 180
            values = np.load(out / entry["tensor"])
            assert values.shape == (3, 32, 32) == tuple(entry["shape"])
            assert float(values.astype(np.float64).sum()) == pytest.approx(entry["sum"], rel=1e-6)
        axiom = r["methods"]["ig"]["axiom"]
        assert axiom["name"] == "completeness" and axiom["ok"] is True
        assert axiom["residual"] == pytest.approx(
            abs(axiom["sum"] - (axiom["score"] - axiom["baseline_score"])), abs=1e-9
        )
        assert r["methods"]["smoothgrad"]["axiom"] is None
        model_input = np.load(out / r["input"])
        gxi = np.load(out / r["methods"]["gradxinput"]["tensor"])
        assert model_input.shape == (3, 32, 32)
        # Gradient x input is zero exactly where the input is.
        assert np.all(gxi[model_input == 0] == 0)
    assert record["axioms"]["ig"] == {
        "axiom": "completeness", "images": 3, "flagged": 0,
        "worst": pytest.approx(max(r["methods"]["ig"]["axiom"]["relative"] for r in ok)),
    }  # fmt: skip
    page = (out / "attribute.html").read_text()
    assert "Integrated Gradients" in page and "im1/ig.png" in page and "broken.png" in page
    lines = (out / "attribute.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["settings"]["methods"] == record["methods"]
    assert len(lines) == 1 + 4
    assert "ig" in stdout and "completeness" in stdout


def test_resume_goes_on_and_refuses_other_settings(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    args = ["-m", "gradxinput", "-o", str(out)]
    code, stdout, stderr = _invoke(tmp_path, TINY_CNN, str(folder), *args)
    assert code == 0, stdout + stderr
    first = (out / "im0" / "gradxinput.png").stat().st_mtime_ns
    make_image(folder / "im9.png", size=(40, 32), seed=9)
    code, stdout, stderr = _invoke(tmp_path, TINY_CNN, str(folder), *args, "--resume")
    assert code == 0, stdout + stderr
    assert "1 attributed, 2 reused" in stderr
    record = json.loads((out / "attribute.json").read_text())
    assert [r["image"] for r in record["images"]] == ["im0.png", "im1.png", "im9.png"]
    assert (out / "im0" / "gradxinput.png").stat().st_mtime_ns == first
    assert (out / "im9" / "gradxinput.png").is_file()
    code, stdout, stderr = _invoke(
        tmp_path, TINY_CNN, str(folder), *args, "--resume", "--target", "1"
    )
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert f"--resume: {out} was written with target=top1 (now 1);" in stderr
    assert (out / "im9" / "gradxinput.png").is_file()


@pytest.mark.parametrize(
    ("source", "args", "words"),
    [
        (TINY_CNN, ["-m", "gradcam"], "actviz run --cam-method gradcam"),
        (TINY_CNN, ["-m", "bogus"], "--method takes one of ig, smoothgrad, gradxinput"),
        (TINY_CNN, ["-m", "rollout"], "has no attention layer"),
        (TINY_VIT, ["-m", "lrp"], "no rules for attention"),
        (TINY_CNN, ["--baseline", "nowhere.png"], "--baseline takes zero, blur, mean"),
        (TINY_CNN, ["--target", "9"], "class index 9 is out of range"),
    ],
)
def test_usage_errors_say_the_fix_and_leave_nothing(
    tmp_path: Path, source: str, args: list[str], words: str
) -> None:
    folder = _inputs(tmp_path, 1)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(tmp_path, source, str(folder), *args, "-o", str(out))
    assert code == 2, stdout + stderr
    assert words in " ".join(stderr.split())
    assert "Traceback" not in stderr
    assert not out.exists()


def test_vit_rollout_and_gradient_rollout_on_the_patch_grid(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 1)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        tmp_path, TINY_VIT, str(folder), "-m", "rollout,grad-rollout,ig", "--steps", "4",
        "--save-tensors", "-o", str(out),
    )  # fmt: skip
    assert code == 0, stdout + stderr
    record = json.loads((out / "attribute.json").read_text())
    (image,) = record["images"]
    for method in ("rollout", "grad-rollout"):
        entry = image["methods"][method]
        assert entry["shape"] == [1, 4, 4]  # the class token's row over the 4 x 4 patches
        assert entry["axiom"]["name"] == "row sums" and entry["axiom"]["ok"] is True
        assert np.load(out / entry["tensor"]).shape == (1, 4, 4)
    assert image["methods"]["ig"]["shape"] == [3, 32, 32]
    assert any("need_weights=True" in note for note in record["notes"])
    assert record["how"]["rollout"]["blocks"] == 2
    assert record["signed"]["rollout"] is False


def test_channels_last_gives_the_same_attributions(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 1)
    found = []
    for extra in ([], ["--channels-last"]):
        out = tmp_path / f"out{len(extra)}"
        code, stdout, stderr = _invoke(
            tmp_path, TINY_CNN, str(folder), "-m", "ig", "--steps", "4", "--save-tensors",
            "-o", str(out), *extra,
        )  # fmt: skip
        assert code == 0, stdout + stderr
        found.append(np.load(out / "im0" / "ig.npy"))
    np.testing.assert_allclose(found[0], found[1], rtol=1e-4, atol=1e-6)


def test_too_few_steps_are_warned_about_everywhere(tmp_path: Path) -> None:
    folder = _inputs(tmp_path, 2)
    out = tmp_path / "few"
    code, stdout, stderr = _invoke(tmp_path, CUBE, str(folder), "--steps", "1", "-o", str(out))
    assert code == 0, stdout + stderr
    said = " ".join(stderr.split())
    assert "completeness residual is above 5%" in said and "raise --steps" in said
    record = json.loads((out / "attribute.json").read_text())
    assert record["axioms"]["ig"]["flagged"] == 2
    for image in record["images"]:
        axiom = image["methods"]["ig"]["axiom"]
        # The midpoint rule gives 3/4 of the cube's integral.
        assert axiom["ok"] is False and axiom["relative"] == pytest.approx(0.25, rel=1e-3)
    assert any("raise --steps" in w for w in record["warnings"])
    assert "FLAGGED" in (out / "attribute.html").read_text()
    out = tmp_path / "enough"
    code, stdout, stderr = _invoke(tmp_path, CUBE, str(folder), "--steps", "2", "-o", str(out))
    assert code == 0 and "raise --steps" not in stderr
    record = json.loads((out / "attribute.json").read_text())
    assert all(i["methods"]["ig"]["axiom"]["relative"] < 1e-5 for i in record["images"])


@pytest.mark.slow
def test_random_weights_are_said_in_json_terminal_page_and_card(tmp_path: Path) -> None:
    import actviz

    image = make_image(tmp_path / "cat.png", size=(40, 32))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["attribute", "resnet18", str(image), "-m", "gradxinput", "--input-size", "32,32",
         "-o", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "RANDOM WEIGHTS" in result.stdout and "RANDOM WEIGHTS" in result.stderr
    record = json.loads((out / "attribute.json").read_text())
    assert record["random_weights"] is True and record["weights"]["random"] is True
    assert record["random_note"] and "RANDOM WEIGHTS" in record["warnings"][0]
    assert "RANDOM WEIGHTS" in (out / "attribute.html").read_text()
    picture = out / "cat" / "gradxinput.png"
    assert picture.is_file()
    api = actviz.attribute(
        "resnet18", image, method="gradxinput", input_size=(32, 32), out=tmp_path / "api"
    )
    assert api.random_weights is True and len(api.pictures()) == 1
    html = api._repr_html_()
    assert "RANDOM WEIGHTS" in html and "actviz attribute" in html
    assert "AttributeResult(model='resnet18'" in repr(api)


def test_python_face_takes_flat_keywords_and_names_a_wrong_one(tmp_path: Path) -> None:
    import torch
    from torch import nn

    import actviz
    from actviz.command import KeywordError

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, 3, 32, 32))
    image = make_image(tmp_path / "a.png", size=(40, 32))
    result = actviz.attribute(
        model, image, method="ig", steps=3, input_size=(32, 32), out=tmp_path / "out"
    )
    assert result.methods == ["ig"] and result.axioms["ig"]["images"] == 1
    assert result.images[0]["methods"]["ig"]["axiom"]["name"] == "completeness"
    assert "ig" in result._repr_html_() and "residual" in result._repr_html_()
    with pytest.raises(KeywordError, match="did you mean steps"):
        actviz.attribute(model, image, stepz=3, out=tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_cam_eval_scores_attributions_beside_cams_and_sanity_flags_sobel(tmp_path: Path) -> None:
    folder = _inputs(tmp_path)
    factory = tmp_path / "net.py"
    factory.write_text(TINY_CNN)
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        ["cam-eval", f"{factory}:build", str(folder), "-l", "4", "-m", "gradcam,ig,gradxinput",
         "--ig-steps", "8", "--input-size", "32,32", "--steps", "6", "--sanity-blocks", "2",
         "-o", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    record = json.loads((out / "cam-eval.json").read_text())
    assert record["methods"] == ["gradcam", "ig", "gradxinput"]
    assert record["titles"]["ig"] == "Integrated Gradients"
    assert record["attribution"]["ig"] == {
        "steps": 8,
        "integration": "gausslegendre",
        "baseline": "zero",
    }
    summary = record["summary"]
    for name in ("ig", "gradxinput", "gradcam"):
        assert summary[name]["metrics"]["deletion_auc"]["mean"] is not None
    # The maps follow the weights: IG decorrelates when the last blocks are re-initialised;
    # the Sobel map never reads them and is flagged.
    assert summary["ig"]["sanity"]["flagged"] is False
    assert summary["ig"]["sanity"]["stages"][-1]["spearman"]["mean"] < 0.9
    assert summary["sobel"]["sanity"]["flagged"] is True
    image = record["images"][0]
    assert np.asarray(image["maps"]["ig"]).shape == (32, 32)
    assert np.asarray(image["maps"]["gradcam"]).shape == (8, 8)
    assert "Integrated Gradients" in result.stdout


def test_outputs_doc_lists_the_files_attribute_writes() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "outputs.md").read_text()
    for name in (
        "`attribute.json`", "`attribute.jsonl`", "`attribute.html`",
        "`<image>/<method>.png`", "`<image>/<method>.npy`", "`<image>/input.npy`",
    ):  # fmt: skip
        assert name in text, name
