"""`actviz label` end to end on the planted model (red, green and blue detectors and five
constant channels): the labels, the record, the page and its links, the chart, shuffled tags,
classes, a dictionary's features, --resume, and every bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import actviz
from actviz.cli import app
from tests.concept_data import write_factory, write_squares, write_tags

COLOURS = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("planted")
    held = write_squares(root / "images", 48, seed=0, share=0.2, single=True)
    return {
        "root": root,
        "model": write_factory(root),
        "images": root / "images",
        "tags": write_tags(root / "tags.csv", held),
        "held": held,
    }


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["label", *args])
    return result.exit_code, result.stdout, result.stderr


def _common(planted: dict[str, object]) -> list[str]:
    return [str(planted["model"]), str(planted["images"]), "--layer", "1", "--input-size", "32,32"]


@pytest.mark.slow
def test_planted_detectors_are_labelled_and_constants_are_not(
    planted: dict[str, object], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # A top-images run of the layer to link to (its document names each channel's sheet).
    sheets = tmp_path / "ti"
    sheets.mkdir()
    (sheets / "top-images.json").write_text(
        json.dumps(
            {
                "layers": [
                    {
                        "name": "1",
                        "channels": [
                            {"channel": c, "sheet": f"top-images/00_1/c{c:04d}.png"}
                            for c in range(8)
                        ],
                    }
                ]
            }
        )
    )
    code, stdout, stderr = _invoke(
        *_common(planted),
        "--tags",
        str(planted["tags"]),
        "-o",
        str(out),
        "--top-images",
        str(sheets),
    )
    assert code == 0, stdout + stderr
    record = json.loads((out / "labels.json").read_text())
    assert record["command"] == "label" and record["random_weights"] is False
    assert record["metric"] == "auprc" and record["metrics"]["auc"]["sane"] is False
    layer = record["layers"][0]
    assert layer["layer"] == "1" and layer["units"] == 8 and layer["labelled"] == 3
    units = {r["unit"]: r for r in layer["records"]}
    for c, colour in enumerate(COLOURS):
        r = units[c]
        assert r["label"] == colour and r["metric"] == "auprc"
        assert r["score"] == pytest.approx(1.0) and r["p"] < 0.001 and r["q"] <= 0.05
        positives = sum(1 for squares in planted["held"].values() if colour in squares)  # type: ignore[attr-defined]
        assert r["positives"] == positives and [e["concept"] for e in r["labels"]] == [colour]
        assert r["sheet"] == f"../ti/top-images/00_1/c{c:04d}.png"
    for c in range(3, 8):  # constants: nothing to label, p = 1
        assert units[c]["label"] is None and units[c]["labels"] == []
        assert units[c]["p"] == 1.0
    assert layer["tests"] == 24 and layer["discoveries"] == 3
    assert len(layer["tables"]["auprc"]) == 8 and len(layer["tables"]["auprc"][0]) == 3
    # The concepts: each tested, each labelling one unit, each learnable from the layer.
    concepts = {c["concept"]: c for c in record["concepts"]}
    assert set(concepts) == set(COLOURS)
    for colour in COLOURS:
        c = concepts[colour]
        assert c["tested"] and c["units"] == {"1": 1}
        assert c["learnability"]["layers"]["1"] > 0.95 > c["learnability"]["base"]
    # The terminal table, piped: plain columns.
    assert "3 of 8 channels labelled, 5 unlabelled" in stdout
    assert any(line.split()[:2] == ["0", "red"] for line in stdout.splitlines())
    # The page: every label links to its sheet; the chart is drawn.
    page = (out / layer["page"]).read_text()
    assert 'href="../../ti/top-images/00_1/c0000.png"' in page and ">red</a>" in page
    assert "unlabelled" in page and "RANDOM WEIGHTS" not in page
    with Image.open(out / layer["chart"]) as chart:
        assert chart.size[0] == 1000 and np.asarray(chart.convert("RGB")).std() > 10
    index = (out / "label.html").read_text()
    assert "label/00_1.html" in index and "Concepts" in index


def test_shuffled_tags_label_nothing(planted: dict[str, object], tmp_path: Path) -> None:
    rows = (Path(str(planted["tags"]))).read_text().splitlines()
    header, body = rows[0], [r.split(",") for r in rows[1:]]
    names = sorted({image for image, _ in body})
    shuffled = names[:]
    random.Random(3).shuffle(shuffled)
    moved = dict(zip(names, shuffled, strict=True))
    tags = tmp_path / "shuffled.csv"
    tags.write_text("\n".join([header, *(f"{moved[i]},{t}" for i, t in body)]) + "\n")
    result = actviz.label(
        str(planted["model"]),
        str(planted["images"]),
        layers="1",
        tags=tags,
        input_size=(32, 32),
        out=tmp_path / "out",
        report=False,
        learnability=False,
    )
    assert result.layers[0].labels() == {}
    assert not (tmp_path / "out" / "label.html").exists()


def test_classes_and_the_notebook_card(tmp_path: Path) -> None:
    model = write_factory(tmp_path)
    write_squares(tmp_path / "images", 40, seed=1, share=0.2, classes=True, single=True)
    result = actviz.label(
        model,
        tmp_path / "images",
        layers="1",
        classes=True,
        input_size=(32, 32),
        out=tmp_path / "out",
        learnability=False,
    )
    assert sorted(c["concept"] for c in result.concepts) == ["blue", "green", "none", "red"]
    assert result.layers[0].labels() == {0: "red", 1: "green", 2: "blue"}
    html = result._repr_html_()
    assert "red" in html and "labels.json" in html and "random weights" not in html.lower()
    assert "LabelResult" in repr(result) or "label" in repr(result)


def test_a_dictionary_features_are_labelled(planted: dict[str, object], tmp_path: Path) -> None:
    import torch

    from actviz.dictionary import SparseDictionary, dictionary_bytes

    # Eight features that are the eight channels: the same labels, as features.
    eye = torch.eye(8)
    sae = SparseDictionary(
        w_enc=eye,
        b_enc=torch.zeros(8),
        w_dec=eye.clone(),
        b_dec=torch.zeros(8),
        mean=torch.zeros(8),
        scale=1.0,
        k=8,
        config={"model": str(planted["model"]), "layer": {"key": "1", "module": "1"}},
    )
    file = tmp_path / "sae.safetensors"
    file.write_bytes(dictionary_bytes(sae))
    result = actviz.label(
        str(planted["model"]),
        str(planted["images"]),
        sae=file,
        tags=planted["tags"],
        input_size=(32, 32),
        out=tmp_path / "out",
        report=False,
        learnability=False,
    )
    layer = result.layers[0]
    assert layer.unit == "feature" and layer.units == 8
    assert layer.labels() == {0: "red", 1: "green", 2: "blue"}


@pytest.mark.slow
def test_resume_scores_only_new_images_and_gives_the_same_labels(tmp_path: Path) -> None:
    model = write_factory(tmp_path)
    held = write_squares(tmp_path / "images", 30, seed=2)
    tags = write_tags(tmp_path / "tags.csv", held)
    out = tmp_path / "out"
    common = [model, str(tmp_path / "images"), "-l", "1", "--input-size", "32,32", "-b", "4"]
    common += ["--tags", str(tags), "-o", str(out), "--no-learnability"]
    code, stdout, stderr = _invoke(*common)
    assert code == 0, stdout + stderr
    more = write_squares(tmp_path / "more", 6, seed=9)
    for name in more:
        (tmp_path / "more" / name).rename(tmp_path / "images" / f"x{name}")
    write_tags(tags, {**held, **{f"x{k}": v for k, v in more.items()}})
    code, stdout, stderr = _invoke(*common, "--resume")
    assert code == 0 and "6 scored, 30 reused (--resume)" in stdout + stderr, stdout + stderr
    resumed = json.loads((out / "labels.json").read_text())
    fresh_out = tmp_path / "fresh"
    code, stdout, stderr = _invoke(*[a if a != str(out) else str(fresh_out) for a in common])
    assert code == 0, stdout + stderr
    fresh = json.loads((fresh_out / "labels.json").read_text())
    assert resumed["images"]["scored"] == fresh["images"]["scored"] == 36
    assert resumed["layers"][0]["records"] == fresh["layers"][0]["records"]
    assert resumed["layers"][0]["tables"] == fresh["layers"][0]["tables"]
    # A kill in the middle of the last line: that batch is scored again, once.
    ledger = out / "label.jsonl"
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    for scored in ("2 scored, 34 reused", "0 scored, 36 reused"):
        code, stdout, stderr = _invoke(*common, "--resume")
        assert code == 0 and scored in stdout + stderr, stdout + stderr
        again = json.loads((out / "labels.json").read_text())
        assert again["layers"][0]["records"] == fresh["layers"][0]["records"]
    # Other settings, or a folder another command wrote, are not a run to resume.
    before = ledger.read_bytes()
    code, stdout, stderr = _invoke(*common, "--resume", "--score", "mean")
    assert code == 2 and "was written with score=max (now mean);" in stderr, stdout + stderr
    assert ledger.read_bytes() == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("")
    code, stdout, stderr = _invoke(*common[:-3], "-o", str(other), "--no-learnability", "--resume")
    assert code == 2 and "holds no label run to resume" in stderr, stdout + stderr


def test_bad_inputs_exit_2_and_write_nothing(planted: dict[str, object], tmp_path: Path) -> None:
    common = _common(planted)
    out = tmp_path / "out"

    def refused(*args: str) -> str:
        code, stdout, stderr = _invoke(*common, "-o", str(out), *args)
        assert code == 2, stdout + stderr
        assert not out.exists()
        return " ".join(stderr.split())

    assert "label needs concepts" in refused()
    assert "one source of concepts" in refused("--classes", "--tags", str(planted["tags"]))
    missing = tmp_path / "missing.csv"
    missing.write_text("image,tag\nnope.png,red\nnot/here.jpg,blue\n")
    assert "none of the 2 image(s) named in" in refused("--tags", str(missing))
    assert "no such file" in refused("--tags", str(tmp_path / "absent.csv"))
    assert "subfolders" in refused("--classes")  # a flat folder has no classes
    assert "at least 1000" in refused("--tags", str(planted["tags"]), "--permutations", "100")
    assert "top-images.json" in refused(
        "--tags", str(planted["tags"]), "--top-images", str(tmp_path)
    )
    few = tmp_path / "few.csv"
    few.write_text("image,tag\nim000.png,purple\nim001.png,purple\n")
    assert "no concept has enough images" in refused("--tags", str(few))
    clip = refused("--clip", f"ViT-B-32@{tmp_path / 'clip.bin'}", "--words", str(few))
    assert "no local file" in clip and "offline" in clip
    # A mask of another size than its image.
    masks = tmp_path / "masks" / "red"
    masks.mkdir(parents=True)
    Image.fromarray(np.zeros((20, 30), np.uint8)).save(masks / "im000.png")
    message = refused("--masks", str(tmp_path / "masks"))
    assert "im000.png is 30x20 but its image" in message and "48x48" in message


def test_unmatched_tags_and_untested_concepts_are_said(
    planted: dict[str, object], tmp_path: Path
) -> None:
    text = Path(str(planted["tags"])).read_text()
    tags = tmp_path / "tags.csv"
    tags.write_text(text + "ghost.png,red\nim000.png,purple\nim001.png,purple\n")
    result = actviz.label(
        str(planted["model"]),
        str(planted["images"]),
        layers="1",
        tags=tags,
        input_size=(32, 32),
        out=tmp_path / "out",
        report=False,
        learnability=False,
    )
    warnings = " ".join(result.warnings)
    assert "1 name(s) in" in warnings and "ghost.png" in warnings
    assert "concept 'purple' is not tested: 2 positive image(s)" in warnings
    purple = next(c for c in result.concepts if c["concept"] == "purple")
    assert purple["tested"] is False and "fewer than --min-positives 5" in purple["reason"]
    record = json.loads(result.record.read_text())
    assert record["source"]["unmatched"] == ["ghost.png"]
    assert result.layers[0].labels() == {0: "red", 1: "green", 2: "blue"}


@pytest.mark.slow
def test_random_weights_are_said_everywhere(tmp_path: Path) -> None:
    write_squares(tmp_path / "images", 12, seed=6, share=0.0, classes=True, single=True)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        "resnet18",
        str(tmp_path / "images"),
        "-l",
        "layer1",
        "--classes",
        "--min-positives",
        "3",
        "--input-size",
        "64,64",
        "--no-learnability",
        "-o",
        str(out),
    )
    assert code == 0, stdout + stderr
    record = json.loads((out / "labels.json").read_text())
    assert record["random_weights"] is True and record["weights"]["random"] is True
    assert "RANDOM WEIGHTS" in record["weights"]["warning"]
    assert "RANDOM WEIGHTS: these labels describe an untrained model" in stdout
    assert "RANDOM WEIGHTS" in stderr  # the warning as it was given
    for page in ("label.html", record["layers"][0]["page"]):
        assert (
            "RANDOM WEIGHTS: these labels describe an untrained network" in (out / page).read_text()
        )
    from actviz.label.result import LabelResult, LayerResult

    result = LabelResult(
        model="resnet18",
        out=out,
        record=out / "labels.json",
        metric="auprc",
        source="classes",
        concepts=record["concepts"],
        layers=[LayerResult("layer1", 64, "channel", 0, record["layers"][0]["records"])],
        images=12,
        failed=[],
        random_weights=True,
        weights=None,
        report=out / "label.html",
    )
    assert "random weights: these labels describe an untrained model" in result._repr_html_()
