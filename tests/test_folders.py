"""Folder runs: layout, batching, resume, and bounded memory, on resnet18 with random weights."""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import actviz
from actviz import api
from actviz.cli import app
from actviz.run import draw as draw_module
from actviz.run import loop as local_engine
from tests.conftest import make_image, run_images

pytestmark = pytest.mark.slow


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    make_image(root / "a" / "x.jpg", seed=1)
    make_image(root / "b" / "x.jpg", seed=2)
    make_image(root / "b" / "deep" / "y.png", size=(40, 90), seed=3)
    make_image(root / "top.png", seed=4)
    (root / "notes.txt").write_text("not an image")
    make_image(root / ".hidden.png", seed=5)
    make_image(root / "._top.png", seed=6)
    return root


def _pngs(out: Path) -> list[str]:
    """The grid PNGs of a run (not the report's charts or the input thumbnails)."""
    return sorted(
        p.relative_to(out).as_posix()
        for p in out.rglob("[0-9]*_*.png")
        if not p.relative_to(out).as_posix().startswith("report/")
    )


def test_folder_layout_mirrors_the_input_tree(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "resnet18",
            str(folder),
            "-l",
            "layer4.1.conv2,fc",
            "-w",
            "none",
            "-o",
            str(out),
            "-b",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert _pngs(out) == [
        f"{d}/{f}"
        for d in ("a/x", "b/deep/y", "b/x", "top")
        for f in ("00_layer4.1.conv2.png", "01_fc.png")
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["images"]["count"] == manifest["images"]["ok"] == 4
    assert [Path(i["path"]).relative_to(folder).as_posix() for i in run_images(out)] == [
        "a/x.jpg",
        "b/deep/y.png",
        "b/x.jpg",
        "top.png",
    ]
    assert manifest["skipped"] == [{"path": str(folder / "notes.txt"), "reason": "not an image"}]
    assert "hidden" not in json.dumps(manifest) and "._top" not in json.dumps(manifest)
    assert "4 done" in result.stderr and "1 non-image skipped" in result.stderr
    assert "notes.txt: not an image" in result.stderr
    # Different inputs give different pictures: a/x and b/x did not overwrite each other.
    a = np.asarray(Image.open(out / "a/x/00_layer4.1.conv2.png"))
    b = np.asarray(Image.open(out / "b/x/00_layer4.1.conv2.png"))
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_batch_size_does_not_change_the_pictures(folder: Path, tmp_path: Path) -> None:
    runs = {}
    for batch in (1, 16):
        out = tmp_path / f"out{batch}"
        actviz.run(
            "resnet18",
            [folder],
            layers="layer1.0.conv1,layer3.1.bn2,fc",
            out=out,
            weights="none",
            batch_size=batch,
        )
        runs[batch] = out
    assert _pngs(runs[1]) == _pngs(runs[16]) and len(_pngs(runs[1])) == 12
    for rel in _pngs(runs[1]):
        one = np.asarray(Image.open(runs[1] / rel)).astype(int)
        many = np.asarray(Image.open(runs[16] / rel)).astype(int)
        assert one.shape == many.shape
        # Batched convolutions may round differently in the last float bit; allow a
        # colour-level step on a handful of pixels, nothing more.
        assert (one != many).mean() < 0.002, rel
        assert np.abs(one - many)[one != many].max(initial=0) <= 1 or (one != many).sum() < 5


class _StopAfter:
    """A reporter that interrupts the run after ``n`` images, like Ctrl-C would."""

    def __init__(self, n: int) -> None:
        self.n = n

    def warn(self, message: str) -> None:
        pass

    def start(self, total: int) -> None:
        pass

    def advance(self, result: api.ImageResult) -> None:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def test_resume_after_an_interruption_redoes_nothing(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    kwargs: dict[str, Any] = {"layers": "layer2.0.conv1,fc", "weights": "none", "batch_size": 1}
    with pytest.raises(KeyboardInterrupt):
        actviz.run("resnet18", [folder], out=out, reporter=_StopAfter(2), **kwargs)
    records = run_images(out)
    assert len(records) == 2  # two images finished; a third may have been in flight
    recorded = [layer["file"] for r in records for layer in r["layers"]]
    first = {p: os.stat(out / p).st_mtime_ns for p in recorded}
    assert len(first) == 4 and set(first) <= set(_pngs(out))
    assert not [p for p in out.rglob("*") if "actviz-tmp" in p.name]

    refused = CliRunner().invoke(app, ["run", "resnet18", str(folder), "-o", str(out)])
    assert refused.exit_code == 2 and "--resume" in refused.stderr

    result = actviz.run("resnet18", [folder], out=out, resume=True, **kwargs)
    assert len(result.reused) == 2 and result.grids_written == 4
    assert {p: os.stat(out / p).st_mtime_ns for p in first} == first  # untouched
    clean = tmp_path / "clean"
    actviz.run("resnet18", [folder], out=clean, **kwargs)
    assert _pngs(out) == _pngs(clean)
    for rel in _pngs(clean):
        assert np.array_equal(
            np.asarray(Image.open(out / rel)), np.asarray(Image.open(clean / rel))
        ), rel
    assert [i.status for i in result.images] == ["reused", "reused", "ok", "ok"]
    assert all(len(i.layers) == 2 for i in result.images)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["images"] == {
        "count": 4,
        "ok": 2,
        "reused": 2,
        "failed": 0,
        "records": ".actviz-records.jsonl",
        "table": "stats.parquet",
    }
    assert [i["path"] for i in run_images(out)] == [i["path"] for i in run_images(clean)]
    assert all(len(i["layers"]) == 2 for i in run_images(out))

    changed = CliRunner().invoke(
        app,
        ["run", "resnet18", str(folder), "-l", "conv", "-w", "none", "-o", str(out), "--resume"],
    )
    assert changed.exit_code == 2 and "other --out" in changed.stderr


def test_overwrite_replaces_earlier_grids(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    actviz.run("resnet18", [folder], layers="conv1", out=out, weights="none")
    (out / "keep.txt").write_text("mine")
    actviz.run("resnet18", [folder], layers="fc", out=out, weights="none", overwrite=True)
    assert all(p.endswith("00_fc.png") for p in _pngs(out))
    assert (out / "keep.txt").read_text() == "mine"  # not ours: left alone


def test_overwrite_with_other_inputs_leaves_only_this_runs_outputs(
    folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    actviz.run("resnet18", [folder], layers="conv1", out=out, weights="none")
    earlier = {p.parent.relative_to(out).as_posix() for p in out.rglob("00_conv1.png")}
    assert earlier == {"a/x", "b/x", "b/deep/y", "top"}
    other = tmp_path / "other"
    make_image(other / "elsewhere.png", size=(40, 40), seed=99)
    (out / "keep.txt").write_text("mine")
    result = actviz.run(
        "resnet18", [other], layers="conv1", out=out, weights="none", overwrite=True
    )
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    # Only this run's image folder, run files and report pages are left, and the user's file.
    assert {w.split("/")[0] for w in written} == {
        "elsewhere",
        "report",
        "keep.txt",
        "index.html",
        "manifest.json",
        "stats.json",
        "stats.csv",
        "stats.parquet",
        ".actviz-records.jsonl",
        ".actviz-summary.json",
    }
    assert not any((out / name).exists() for name in earlier)
    assert not (out / "a").exists() and not (out / "b").exists()  # emptied folders go too
    assert any("kept 1 file(s) no run wrote: keep.txt" in w for w in result.warnings)
    html = "".join(p.read_text() for p in out.rglob("*.html"))
    assert "elsewhere/00_conv1.png" in html
    assert not any(f"{name}/00_conv1.png" in html for name in earlier)  # nothing of the earlier
    assert [Path(i["path"]).name for i in run_images(out)] == ["elsewhere.png"]
    assert json.loads((out / "manifest.json").read_text())["images"]["count"] == 1


def test_live_activations_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "many"
    for i in range(24):
        make_image(root / f"{i:02d}.png", size=(32, 32), seed=i)
    seen: dict[int, weakref.ref[Any]] = {}
    peak = 0
    original = draw_module.draw_image

    def counting(job: Any) -> Any:
        nonlocal peak
        for cap in job.captures:
            seen[id(cap.tensor)] = weakref.ref(cap.tensor)
        peak = max(peak, sum(ref() is not None for ref in seen.values()))
        return original(job)

    monkeypatch.setattr(local_engine, "draw_image", counting)
    layers = "layer1.0.conv1,layer4.1.conv2,fc"
    result = actviz.run(
        "resnet18", [root], layers=layers, out=tmp_path / "out", weights="none", batch_size=2
    )
    assert len(result.images) == 24 and not result.failed
    # 12 batches of 3 captures went through; at most two batches' worth were ever alive.
    assert 3 <= peak <= 2 * 3


def test_a_file_name_that_is_not_utf8_runs_resumes_and_reports(tmp_path: Path) -> None:
    root = tmp_path / "photos"
    odd = root / os.fsdecode(b"caf\xe9.png")  # Latin-1 on disk: a lone surrogate in Python
    make_image(odd, seed=1)
    make_image(root / "plain.png", seed=2)
    out = tmp_path / "out"
    kwargs: dict[str, Any] = {"layers": "conv1", "weights": "none", "out": out}
    result = actviz.run("resnet18", [root], **kwargs)
    assert [r.status for r in result.images] == ["ok", "ok"]
    # The JSON files hold the name as the escape \udce9 and read back as the same string.
    assert sorted(im["path"] for im in run_images(out)) == sorted(
        [str(odd), str(root / "plain.png")]
    )
    assert "\\udce9" in (out / ".actviz-records.jsonl").read_text(encoding="utf-8")
    page = (out / "index.html").read_bytes().decode("utf-8")  # valid UTF-8 throughout
    assert "caf?.png" in page
    again = actviz.run("resnet18", [root], resume=True, **kwargs)
    assert sorted(r.status for r in again.images) == ["reused", "reused"]
