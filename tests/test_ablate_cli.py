"""`actviz ablate` end to end: the table, the files, --json, --fail-on, --resume, a run's index
linking the page, random weights said everywhere, and every bad input refused in one line
with exit 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from actviz.cli import app
from tests.test_ablate import SIZE, dictionary_file, squares

FACTORY = """
from tests.test_ablate import planted


def build():
    return planted()
"""


def _invoke(tmp_path: Path, *args: str, factory: str = FACTORY) -> tuple[int, str, str]:
    source = tmp_path / "net.py"
    source.write_text(factory)
    result = CliRunner().invoke(
        app, ["ablate", f"{source}:build", *args, "--input-size", f"{SIZE},{SIZE}"]
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_table_files_json_and_fail_on(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in", per=4)
    (folder / "2_grey" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        tmp_path, str(folder), "--layer", "1", "--units", "3", "-o", str(out), "--cases", "2"
    )
    assert code == 3, stdout + stderr  # one image could not be read, the rest were scored
    assert "broken.png" in stderr
    lines = stdout.splitlines()
    assert lines[0] == "12 images, unit 3 at 1 (zero); labels from folders"
    red = next(line.split() for line in lines if line.strip().startswith("0_red"))
    assert red == ["0_red", "4", "100.0%", "0.0%", "-100.0", "50.0%", red[-1]]
    assert float(red[-1]) < -5
    assert "RANDOM" not in stdout  # the factory's own weights
    record = json.loads((out / "ablate.json").read_text())
    assert record["command"] == "ablate" and record["random_weights"] is False
    assert record["mode"]["spec"] == "zero" and record["remove"] == {"kind": "units", "units": [3]}
    assert record["protocol"]["split"] == "torch.fx prefix and suffix"
    assert record["images"]["ok"] == 12 and record["images"]["failed"][0]["image"].endswith(
        "broken.png"
    )
    assert [c["class"] for c in record["cases"]] == ["0_red", "0_red"]
    for case in record["cases"]:
        assert (out / case["file"]).is_file()
    page = (out / "ablate.html").read_text()
    assert "0_red" in page and "Where the lost images went" in page and "cases/01_" in page
    assert "RANDOM WEIGHTS" not in page
    # --json prints the record; --fail-on exits 4 naming the class.
    code, stdout, stderr = _invoke(
        tmp_path,
        str(folder / "0_red"),
        str(folder / "1_blue"),
        "--layer",
        "3",
        "-u",
        "3",
        "--json",
        "--fail-on",
        "dacc<-0.5",
        "--no-report",
        "-o",
        str(tmp_path / "j"),
        "--labels",
        "none",
    )
    assert code == 4, stdout + stderr
    document = json.loads(stdout)
    assert document["labels"]["source"] == "agreement"
    assert document["protocol"]["shortcut"].startswith("linear readout")
    # Without labels a class is the model's own prediction, named by its index.
    assert document["fail_on"]["crossed"][0]["class"] == "class 0"
    assert "--fail-on dacc<-0.5: 1 class(es) crossed it; worst: class 0 under unit 3" in stderr
    assert not (tmp_path / "j" / "ablate.html").exists()


@pytest.mark.slow
def test_resume_and_a_runs_index_links_the_page(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in", per=2)
    out = tmp_path / "out"
    source = tmp_path / "net.py"
    source.write_text(FACTORY)
    ran = CliRunner().invoke(
        app,
        [
            "run",
            f"{source}:build",
            str(folder / "0_red" / "im0.png"),
            "-o",
            str(out),
            "-q",
            "--input-size",
            f"{SIZE},{SIZE}",
        ],
    )
    assert ran.exit_code == 0, ran.output
    common = [str(folder), "--layer", "1", "--units", "0-5", "--each", "-o", str(out), "-q"]
    code, stdout, stderr = _invoke(tmp_path, *common)
    assert code == 2 and "holds no ablate to resume" not in stderr and "not empty" in stderr
    code, stdout, stderr = _invoke(tmp_path, *common, "--overwrite")
    assert code == 0, stdout + stderr
    assert 'href="ablate.html"' in (out / "index.html").read_text()
    first = json.loads((out / "ablate.json").read_text())
    ledger = out / "ablate.jsonl"
    lines = ledger.read_text().splitlines()
    assert len(lines) == 1 + 6 + 3  # settings, six images, three measured for the curves
    ledger.write_bytes(ledger.read_bytes()[: -len(lines[-1]) // 2])  # a kill mid-line
    for _ in range(2):
        code, stdout, stderr = _invoke(tmp_path, *common, "--resume")
        assert code == 0, stdout + stderr
        again = json.loads((out / "ablate.json").read_text())
        assert again["classes"] == first["classes"] and again["curves"] == first["curves"]
    kept = ledger.read_bytes()
    code, stdout, stderr = _invoke(tmp_path, *common[:-4], "-u", "1", "-o", str(out), "--resume")
    assert code == 2 and f"--resume: {out} was written with " in stderr, stderr
    assert "remove.units=[0," in stderr and ledger.read_bytes() == kept


@pytest.mark.slow
def test_random_weights_are_said_everywhere(tmp_path: Path) -> None:
    from actviz.ablate.result import AblateResult
    from tests.conftest import make_image

    folder = tmp_path / "in"
    for i in range(2):
        make_image(folder / f"im{i}.png", size=(40, 32), seed=i)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "ablate",
            "resnet18",
            str(folder),
            "--layer",
            "layer4",
            "-u",
            "0-7",
            "-o",
            str(out),
            "--input-size",
            "64,64",
            "--cases",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "RANDOM WEIGHTS" in result.stdout and "RANDOM WEIGHTS" in result.stderr
    record = json.loads((out / "ablate.json").read_text())
    assert record["random_weights"] is True and record["weights"]["random"] is True
    assert record["labels"]["source"] == "agreement"
    assert "RANDOM WEIGHTS" in (out / "ablate.html").read_text()
    import actviz

    again = actviz.ablate(
        "resnet18",
        folder,
        layer="layer4",
        units="0-7",
        out=tmp_path / "py",
        input_size=(64, 64),
        cases=0,
    )
    assert isinstance(again, AblateResult) and again.random_weights
    card = again._repr_html_()
    assert "RANDOM WEIGHTS" in card and "actviz ablate" in card and "units 0-7" in card
    assert "AblateResult(model='resnet18'" in repr(again)


BAD = [
    (["--layer", "1", "--units", "9"], "--units 9 is outside 1's 6 channels (0-5)"),
    (["--layer", "nope", "--units", "1"], "net.py:build matches 'nope'; run `actviz list"),
    (["--layer", "*", "--units", "1"], "ablate edits one layer; --layer * selects"),
    (["--layer", "1"], "say what to remove with one of --units"),
    (["--layer", "1", "-u", "1", "--mode", "shrink"], "--mode takes zero, mean, resample"),
    (["--layer", "1", "-u", "1", "--mode", "scale"], "--mode scale needs a number"),
    (["--layer", "1", "-u", "1", "--fail-on", "acc=0"], "--fail-on takes METRIC<VALUE"),
    (["--layer", "1", "-u", "1", "--labels", "nowhere.csv"], "--labels nowhere.csv: no such"),
]


@pytest.mark.parametrize(("args", "said"), BAD)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, args: list[str], said: str
) -> None:
    folder = squares(tmp_path / "in", per=1)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(tmp_path, str(folder), *args, "-o", str(out))
    assert code == 2, stdout + stderr
    assert said in " ".join(stderr.split()) and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_files_that_do_not_fit_the_layer_are_refused(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in", per=1)
    out = tmp_path / "out"
    wrong = tmp_path / "d.npy"
    np.save(wrong, np.ones(5, dtype=np.float32))
    cases = [
        (
            ["--direction", str(wrong)],
            "has shape (5,); ablate at 1 expects a vector of 1's 6 channels, shape (6,)",
        ),
        (
            [
                "--sae",
                str(dictionary_file(tmp_path / "sae.safetensors", layer="3")),
                "--features",
                "0",
            ],
            "was trained on 3, not 1",
        ),
        (["-u", "1", "--labels", "folders"], None),
    ]
    for args, said in cases:
        code, stdout, stderr = _invoke(
            tmp_path, str(folder), "--layer", "1", *args, "-o", str(out), "-q"
        )
        if said is None:
            assert code == 0, stdout + stderr
            continue
        assert code == 2 and said in " ".join(stderr.split()), stderr
        assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, stderr = _invoke(
        tmp_path, str(empty), "--layer", "1", "-u", "1", "-o", str(tmp_path / "e")
    )
    assert code == 2 and "no images found in" in stderr and not (tmp_path / "e").exists()
    loose = tmp_path / "loose"
    squares(loose, per=1)
    (loose / "stray.png").write_bytes((folder / "0_red" / "im0.png").read_bytes())
    code, _, stderr = _invoke(
        tmp_path, str(loose), "--layer", "1", "-u", "1", "-o", str(tmp_path / "l")
    )
    assert code == 2 and "1 image(s) are outside class subfolders" in stderr


def test_families_that_make_no_sense_are_refused_before_any_work(tmp_path: Path) -> None:
    from actviz.models.families import DETECTION, OPTICAL_FLOW, QUANTIZED, SEGMENTATION, VIDEO

    for family in (DETECTION, OPTICAL_FLOW, QUANTIZED, SEGMENTATION, VIDEO):
        assert family.refusal("ablate"), family.key
    folder = squares(tmp_path / "in", per=1)
    video = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Conv3d(3, 4, 1), nn.Flatten(), nn.LazyLinear(2))
"""
    code, _, stderr = _invoke(
        tmp_path, str(folder), "--layer", "0", "-u", "1", "-o", str(tmp_path / "v"), factory=video
    )
    assert code == 2 and "ablate does not take" in stderr and "clips" in stderr
    assert not (tmp_path / "v").exists()


def test_a_sweeps_table_ranks_by_images_lost_then_in_the_units_order() -> None:
    """Then by the labels' logit drop; ties keep the order the units were given (unit 2
    before unit 10, not as strings sort); an ablation that costs no class names none as the
    class hit most. The pictures pick their ablation by the same order."""
    from types import SimpleNamespace

    from actviz.ablate.pictures import headline
    from actviz.ablate.tables import ranked
    from actviz.cli.ablate import _rows

    lost = {2: 0, 10: 0, 3: 1, 7: 0}
    ablations = [
        {
            "name": f"unit {u}",
            "overall": {"lost": n, "acc_after": 0.5, "dlogit": -0.5 if u == 7 else 0.0},
        }
        for u, n in lost.items()
    ]

    def rows(name: str) -> list[dict[str, object]]:
        hit = name == "unit 3"
        return [
            {"class": "cat", "acc_before": 0.5, "acc_after": 0.25 if hit else 0.5},
            {"class": "dog", "acc_before": 0.5, "acc_after": 0.5},
        ]

    result = SimpleNamespace(
        labels="folders",
        ablations=ablations,
        rows=rows,
        ranked=lambda: [ablations[i] for i in ranked(ablations)],
    )
    head, table = _rows(result)  # type: ignore[arg-type]
    assert [r[0] for r in table] == ["unit 3", "unit 7", "unit 2", "unit 10"]
    assert head[3] == "dlogit" and [r[3] for r in table[:2]] == ["+0.0000", "-0.5000"]
    assert table[0][4:] == ["cat", "-25.0"]
    assert all(row[4:] == ["-", "-"] for row in table[1:])
    assert ablations[headline(ablations)]["name"] == "unit 3"
    tied = [a for a in ablations if a["name"] != "unit 3"]
    assert tied[headline(tied)]["name"] == "unit 7"
    assert headline(ablations[:2]) == 0
