"""Runs over folders of any size: per-image records streamed to the ledger and the table, run-level
summaries equal to pooling every image, resume after a hard kill equal to a clean run."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actviz import api
from actviz.run.records import RunRecords
from actviz.statistics import LayerStats, flag_anomalies
from tests.conftest import run_images, same_up_to_batching, started_and_frozen
from tests.oracles import aggregate_run
from tests.test_ray_failures import _setup as _ray_setup
from tests.test_ray_failures import local_ray  # noqa: F401  (a fixture)

TINY = """
import torch
from torch import nn


def make() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).eval()
"""


@pytest.fixture
def photos(tmp_path: Path, make_photos: Callable[..., Path]) -> Path:
    sizes = [(24 + i % 5, 20) for i in range(24)]
    folder = make_photos(sizes, folder=tmp_path / "photos", name="img{i:03d}.png")
    (folder / "broken.png").write_bytes(b"not a picture")
    return folder


@pytest.fixture
def tiny_model(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return f"{path}:make"


def _stats_run(model: str, photos: Path, out: Path, **extra: Any) -> api.RunResult:
    options: dict[str, Any] = {"grids": False, "report": False, "input_size": (32, 32)}
    options.update(extra)
    return api.run(model, [photos], out=out, layers="all", **options)


def _table(out: Path) -> list[dict[str, Any]]:
    from tests.oracles import read_table_rows

    rows = read_table_rows(out / "stats.parquet")
    return sorted(rows, key=lambda r: (r["image"], r["depth"]))


def test_streamed_summaries_equal_pooling_every_image(
    photos: Path, tiny_model: str, tmp_path: Path
) -> None:
    result = _stats_run(tiny_model, photos, tmp_path / "out")
    assert len(result.images) == 25 and result.count("failed") == 1
    # Every image's layers come back from the ledger, one at a time.
    per_image = {
        image.out_dir.as_posix(): [
            (x.key, LayerStats.from_dict(x.stats)) for x in image.layers if x.stats
        ]
        for image in result.images
        if image.status == "ok"
    }
    assert len(per_image) == 24 and all(len(v) == 7 for v in per_image.values())
    pooled = aggregate_run(per_image)
    doc = json.loads((result.out / "stats.json").read_text())
    assert doc["format"] == 2 and doc["images"]["count"] == 24
    assert [x["name"] for x in doc["run"]["layers"]] == [name for name, _ in pooled]
    for got, (_, want) in zip(doc["run"]["layers"], pooled, strict=True):
        expected = want.to_dict()
        assert all(same_up_to_batching(got[k], expected[k]) for k in expected), got["name"]
    # The flags each image raises are the ones counted, kind by kind.
    counts: dict[str, int] = {}
    for layers in per_image.values():
        for kind in {f.kind for f in flag_anomalies(layers)}:
            counts[kind] = counts.get(kind, 0) + 1
    assert {k: v for k, v in doc["flags"]["images"].items() if v} == counts
    # The table holds one row per image and layer, equal to the image's statistics.
    rows = _table(result.out)
    assert len(rows) == 24 * 7
    for row in rows:
        stats = dict(per_image[row["image"]])[row["layer"]].to_dict()
        assert row["count"] == stats["count"] and row["channels"] == stats["channels"]
        assert same_up_to_batching(
            row["mean"], stats["mean"] if stats["mean"] is not None else math.nan
        )
    # The manifest is sized by the run, not its images, and points at the table.
    manifest = json.loads(result.manifest.read_text())
    assert manifest["images"]["count"] == 25 and manifest["images"]["failed"] == 1
    assert manifest["images"]["table"] == "stats.parquet"


def test_manifest_and_stats_do_not_grow_with_the_images(
    photos: Path, tiny_model: str, tmp_path: Path
) -> None:
    few = tmp_path / "few"
    for path in sorted(photos.glob("img00*.png"))[:4]:
        (few / path.name).parent.mkdir(parents=True, exist_ok=True)
        (few / path.name).write_bytes(path.read_bytes())
    small = _stats_run(tiny_model, few, tmp_path / "small")
    big = _stats_run(tiny_model, photos, tmp_path / "big")
    for name in ("manifest.json", "stats.json"):
        a, b = (small.out / name).stat().st_size, (big.out / name).stat().st_size
        assert abs(a - b) < 0.1 * a, (name, a, b)


def test_the_run_keeps_no_layers_in_memory(photos: Path, tiny_model: str, tmp_path: Path) -> None:
    result = _stats_run(tiny_model, photos, tmp_path / "out")
    stubs = result.images._stubs  # type: ignore[attr-defined]
    assert all(not s.layers and not s.predictions for s in stubs)
    assert all(s.record is not None for s in stubs)
    first = result.images[1]  # [0] is broken.png
    assert first.status == "ok" and first.layers and first.layers[0].stats is not None


def test_a_torn_last_line_is_ignored_and_resume_finishes(
    photos: Path, tiny_model: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out)
    ledger = out / RunRecords.FILE
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
    assert len(run_images(out)) == 25 - 3  # the torn line is left out, not an error
    again = _stats_run(tiny_model, photos, out, resume=True)
    assert again.count("reused") == 24 - 3 and again.count("ok") == 3
    assert len(_table(out)) == 24 * 7


def test_legacy_ledger_lines_are_still_read(tmp_path: Path) -> None:
    records = RunRecords(tmp_path, {"model": "m"})
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "g.png").write_bytes(b"x")
    old = {"settings": records.settings, "path": "a.png", "out_dir": "a", "status": "ok"}
    old["layers"] = [{"file": "a/g.png", "name": "conv"}]
    with (tmp_path / RunRecords.FILE).open("w") as fh:
        fh.write(json.dumps(old) + "\n")
    new = records.add({"path": "b.png", "out_dir": "b", "status": "ok", "layers": []})
    done = records.completed()
    assert set(done) == {("a.png", "a"), ("b.png", "b")}
    assert records.read(done[("a.png", "a")])["layers"][0]["name"] == "conv"
    assert records.read(new)["path"] == "b.png" and done[("b.png", "b")] == new


def test_resume_refusal_names_what_changed(tmp_path: Path) -> None:
    from actviz.errors import OutputError

    RunRecords(tmp_path, {"model": "a", "k": 1}).add({"path": "x", "out_dir": "x"})
    with pytest.raises(OutputError, match=r"k=1 \(now 2\)"):
        RunRecords(tmp_path, {"model": "a", "k": 2}).completed()


def _without_times(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("created", "seconds", "options")}


def test_rebatched_runs_compare_to_one_element_and_float32_rounding() -> None:
    """What a resumed run may differ by from a clean one, and no more: it redoes images in
    batches of another size, so a value within rounding of 0 may change sign."""
    count = 8192
    row = {"image": "a", "count": count, "mean": 0.25, "std": 1.0, "neg_frac": 0.5, "dead": 1}
    rms = math.hypot(0.25, 1.0)

    def changed(**what: Any) -> dict[str, Any]:
        return {**row, **what}

    assert same_up_to_batching([row], [changed(neg_frac=0.5 + 1 / count)])  # one element
    assert not same_up_to_batching([row], [changed(neg_frac=0.5 + 2 / count)])
    assert same_up_to_batching(row, changed(mean=0.25 + 1e-6 * rms))  # float32 rounding
    assert not same_up_to_batching(row, changed(mean=0.25 + 1e-4 * rms))
    assert not same_up_to_batching(row, changed(dead=2))  # counts are exact
    assert not same_up_to_batching(row, changed(image="b"))
    # A run's pooled layer: one element per image.
    run = changed(count=24 * count, images=24)
    assert same_up_to_batching(run, {**run, "neg_frac": 0.5 + 24 / run["count"]})
    assert not same_up_to_batching(run, {**run, "neg_frac": 0.5 + 25 / run["count"]})
    # Outside a layer's statistics, floats match to 1e-6.
    assert not same_up_to_batching({"x": 1e-3}, {"x": 1e-3 + 1e-8})


def _stats_process(
    actviz: list[str], tiny_model: str, photos: Path, out: Path
) -> subprocess.Popen[bytes]:
    """``actviz stats`` on the tiny model, one image a batch, as a process of its own
    (``actviz``: how it is started)."""
    command = [*actviz, "stats", tiny_model, str(photos), "--layers", "all"]
    command += ["--input-size", "32,32", "--out", str(out), "--batch-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_run_killed_mid_folder_resumes_to_a_clean_runs_outputs(
    photos: Path, tiny_model: str, tmp_path: Path
) -> None:
    clean = _stats_run(tiny_model, photos, tmp_path / "clean")
    # Stopped once 7 images are in, so that the kill lands mid-run however late this thread
    # is scheduled.
    proc, out = started_and_frozen(
        lambda out: _stats_process([sys.executable, "-m", "actviz"], tiny_model, photos, out),
        tmp_path / "killed",
        8,
        1 + len(list(photos.iterdir())),  # the settings' line, then one line per file
    )
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "stats.parquet").exists()  # only ever renamed into place when complete
    resumed = _stats_run(tiny_model, photos, out, resume=True)
    assert resumed.count("reused") >= 6
    assert same_up_to_batching(_table(out), _table(clean.out))
    got = json.loads((out / "stats.json").read_text())
    want = json.loads((clean.out / "stats.json").read_text())
    assert same_up_to_batching(got, want)
    assert not list(out.glob(".*actviz-tmp*"))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.usefixtures("local_ray")
def test_stats_on_ray_names_the_images_of_a_batch_that_kills_every_actor(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app

    model, photos = _ray_setup(tmp_path, "red")
    out = tmp_path / "ray"
    result = CliRunner().invoke(
        app,
        ["stats", model, str(photos), "-w", "none", "-l", "conv", "--input-size", "16,16"]
        + ["-b", "3", "-o", str(out), "--engine", "ray", "--workers", "2"],
    )
    assert result.exit_code == 3, result.stderr  # finished, some inputs failed
    failed = {Path(r["path"]).name: r["error"] for r in run_images(out) if r["status"] == "failed"}
    assert sorted(failed) == ["img03.png", "img04.png", "img05.png"]
    assert all("the Ray worker died while processing this batch" in e for e in failed.values())
    doc = json.loads((out / "stats.json").read_text())
    assert doc["images"]["count"] == 10
    assert {r["image"] for r in _table(out)} == {
        f"img{i:02d}" for i in range(13) if i not in (3, 4, 5)
    }


def test_the_report_links_the_first_the_worst_and_the_failed_images(
    photos: Path, tiny_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz.report.pages as pages

    monkeypatch.setattr(pages, "LINKED_FIRST", 2)
    result = _stats_run(tiny_model, photos, tmp_path / "out", report=True)
    doc = json.loads((result.out / "stats.json").read_text())
    worst = {e["image"] for entries in doc["flags"]["worst"].values() for e in entries}
    ok = [i.out_dir.as_posix() for i in result.images if i.status == "ok"]
    failed = [i.out_dir.as_posix() for i in result.images if i.status == "failed"]
    pages_written = {p.stem for p in (result.out / "report" / "images").glob("*.html")}
    assert pages_written == set(ok[:2]) | worst
    index = (result.out / "index.html").read_text()
    assert all(name in index for name in failed)
