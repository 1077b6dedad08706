"""``--resume`` from the run's checkpoint (``.actviz-summary.json``): the summaries and the table
taken up where the earlier run saved them, never read back image by image, and the outputs
equal to a clean run's, whether the checkpoint is used or a changed folder falls back to
reading the records again."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actviz import output
from actviz.run.gradients import RunGradientFlow
from actviz.run.records import LedgerReader, RunRecords
from actviz.run.sink import RunSink
from actviz.statistics import LayerStats, RunningStats, flag_anomalies
from tests.conftest import same_up_to_batching, started_and_frozen
from tests.oracles import aggregate_run
from tests.test_scale import _stats_process, _stats_run, _table, photos, tiny_model

__all__ = ["photos", "tiny_model"]  # fixtures, used by name

SUMMARY = RunSink.CHECKPOINT


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every ledger record read back, by offset."""
    seen: list[int] = []
    original = LedgerReader.read

    def counted(self: LedgerReader, offset: int) -> dict[str, Any]:
        seen.append(offset)
        return original(self, offset)

    monkeypatch.setattr(LedgerReader, "read", counted)
    yield seen


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of records each run's sink folded back from the ledger."""
    counts: list[int] = []
    original = RunSink._replay

    def counted(self: RunSink, stubs: Any) -> None:
        stubs = list(stubs)
        counts.append(sum(s.status == "reused" for s in stubs))
        original(self, stubs)

    monkeypatch.setattr(RunSink, "_replay", counted)
    yield counts


def _csv_rows(out: Path) -> list[str]:
    """The CSV's lines: the header and the run's "(all)" rows in place, the images' rows in
    any order (they come in the order the images finished)."""
    lines = (out / "stats.csv").read_text().splitlines()
    body = [x for x in lines[1:] if not x.startswith("(all)")]
    return [lines[0], *sorted(body), *[x for x in lines if x.startswith("(all)")]]


def _same_outputs(out: Path, clean: Path, *, exact: bool = False) -> None:
    """The table, CSV and stats.json of ``out`` equal ``clean``'s: exactly, or to float noise
    where an image was done again in a batch of other images."""
    same = (lambda a, b: a == b) if exact else same_up_to_batching
    assert same(_table(out), _table(clean))
    got, want = _csv_rows(out), _csv_rows(clean)
    assert len(got) == len(want)
    if exact:
        assert got == want
    assert same(
        json.loads((out / "stats.json").read_text()), json.loads((clean / "stats.json").read_text())
    )
    assert not list(out.glob(".*actviz-tmp*"))


def test_resume_of_a_finished_run_reads_no_record(
    photos: Path, tiny_model: str, tmp_path: Path, reads: list[int]
) -> None:
    clean = _stats_run(tiny_model, photos, tmp_path / "clean")
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out)
    state = json.loads((out / SUMMARY).read_text())
    assert state["images"] == 24 and state["ledger_bytes"] == (out / RunRecords.FILE).stat().st_size
    assert state["table"]["parts"] == ["stats.parquet"] and state["table"]["rows"] == 24 * 7
    reads.clear()
    again = _stats_run(tiny_model, photos, out, resume=True)
    assert again.count("reused") == 24 and again.count("failed") == 1
    assert reads == []
    _same_outputs(out, clean.out, exact=True)
    # Byte for byte, but for the order of rows: the finished table is kept as it was.
    assert (out / "stats.json").read_bytes() == (clean.out / "stats.json").read_bytes()


def test_resume_after_new_images_uses_the_checkpoint_and_appends(
    photos: Path, tiny_model: str, tmp_path: Path, replays: list[int]
) -> None:
    folder = tmp_path / "growing"
    folder.mkdir()
    for path in sorted(photos.iterdir())[:10]:
        (folder / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "out"
    _stats_run(tiny_model, folder, out)  # the first 10 images; the others come later
    for path in sorted(photos.iterdir())[10:]:
        (folder / path.name).write_bytes(path.read_bytes())
    replays.clear()
    resumed = _stats_run(tiny_model, folder, out, resume=True)
    assert resumed.count("reused") == 9 and replays == [0]  # broken.png among them
    clean = _stats_run(tiny_model, folder, tmp_path / "clean")
    _same_outputs(out, clean.out)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_killed_run_resumes_from_its_checkpoint_to_a_clean_runs_outputs(
    photos: Path, tiny_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = _stats_run(tiny_model, photos, tmp_path / "clean")
    checkpointer = tmp_path / "checkpointer.py"
    # The killed run checkpoints after every image: the kill finds parts and a checkpoint.
    checkpointer.write_text(
        "import runpy, sys\n"
        "from actviz.run.sink import RunSink\n"
        "RunSink.CHECKPOINT_SECONDS = -1.0\n"
        "sys.argv = ['actviz', *sys.argv[1:]]\n"
        "runpy.run_module('actviz', run_name='__main__')\n"
    )
    # Stopped once 9 images are in (each checkpointed), so that the kill lands mid-run
    # however late this thread is scheduled.
    proc, out = started_and_frozen(
        lambda out: _stats_process([sys.executable, str(checkpointer)], tiny_model, photos, out),
        tmp_path / "killed",
        10,
        1 + len(list(photos.iterdir())),  # the settings' line, then one line per file
    )
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    assert (out / SUMMARY).exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "stats.parquet").exists()
    state = json.loads((out / SUMMARY).read_text())
    assert state["images"] >= 1 and state["table"]["parts"]
    assert all((out / name).is_file() for name in state["table"]["parts"])
    # As if the kill came while a checkpoint was written: its temporary goes too.
    (out / f".{SUMMARY}.0123abcd.actviz-tmp").write_bytes(b"a torn checkpoint")
    replayed: list[int] = []
    original = RunSink._replay

    def counted(self: RunSink, stubs: Any) -> None:
        stubs = [s for s in stubs if s.status == "reused"]
        replayed.append(len(stubs))
        original(self, stubs)

    monkeypatch.setattr(RunSink, "_replay", counted)
    resumed = _stats_run(tiny_model, photos, out, resume=True)
    reused = resumed.count("reused")
    assert reused >= state["images"]
    # The checkpoint covered its images: only those recorded after it are read back.
    assert replayed == [reused - state["images"]]
    _same_outputs(out, clean.out)


def test_a_resume_over_other_inputs_falls_back_and_equals_a_clean_run(
    photos: Path, tiny_model: str, tmp_path: Path, replays: list[int]
) -> None:
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out)
    for path in sorted(photos.iterdir())[12:]:
        path.unlink()  # a subset of the inputs
    replays.clear()
    resumed = _stats_run(tiny_model, photos, out, resume=True)
    assert resumed.count("reused") == 11 and replays == [11]  # every reused image read back
    clean = _stats_run(tiny_model, photos, tmp_path / "clean")
    _same_outputs(out, clean.out)


def test_a_deleted_grid_falls_back_and_equals_a_clean_run(
    photos: Path, tiny_model: str, tmp_path: Path, replays: list[int]
) -> None:
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out, grids=True)
    victim = next(out.glob("img003/*.png"))
    victim.unlink()
    replays.clear()
    resumed = _stats_run(tiny_model, photos, out, resume=True, grids=True)
    assert resumed.count("reused") == 23 and resumed.count("ok") == 1 and replays == [23]
    assert victim.exists()
    clean = _stats_run(tiny_model, photos, tmp_path / "clean", grids=True)
    _same_outputs(out, clean.out)
    # The checkpoint it leaves covers every image: the next resume reads nothing back.
    replays.clear()
    _stats_run(tiny_model, photos, out, resume=True, grids=True)
    assert replays == [0]
    _same_outputs(out, clean.out)


@pytest.mark.parametrize("damage", ["torn", "garbage", "other_numbers", "missing_part"])
def test_a_damaged_checkpoint_is_ignored(
    photos: Path, tiny_model: str, tmp_path: Path, replays: list[int], damage: str
) -> None:
    clean = _stats_run(tiny_model, photos, tmp_path / "clean")
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out)
    path = out / SUMMARY
    text = path.read_text()
    if damage == "torn":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        path.write_text('{"format": 1, "key": 3, "running": [1, 2]}')
    elif damage == "other_numbers":
        state = json.loads(text)
        state["running"]["layers"] = {"x": {"images": "many"}}
        path.write_text(json.dumps(state))
    else:
        (out / "stats.parquet").unlink()
    replays.clear()
    _stats_run(tiny_model, photos, out, resume=True)
    assert replays == [24]
    _same_outputs(out, clean.out)


def test_overwrite_removes_the_checkpoint_and_the_parts(
    photos: Path, tiny_model: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out)
    (out / ".stats.parquet.0123abcd.actviz-tmp").write_bytes(b"a part")
    (out / f".{SUMMARY}.0123abcd.actviz-tmp").write_bytes(b"a torn checkpoint")
    records = RunRecords(out, {"other": 1})
    records.reset([])
    assert not (out / SUMMARY).exists()
    assert not list(out.glob(".*actviz-tmp"))


def test_running_stats_and_flow_state_round_trip() -> None:
    def layer(mean: float, dead: tuple[int, ...] = ()) -> LayerStats:
        return LayerStats(
            count=64, mean=mean, std=0.5 + mean, min=-1.0, max=float("inf") if mean > 2 else 3.0,
            p01=-0.9, p99=2.9, zero_frac=0.25, neg_frac=0.125, nan=0, inf=1 if mean > 2 else 0,
            channels=4, dead_channels=len(dead), dead_frac=len(dead) / 4, dead_indices=dead,
        )  # fmt: skip

    stats = RunningStats()
    flow = RunGradientFlow()
    for i in range(6):
        stats.add_image(f"img{i}", [("a", layer(i / 3, (1,))), ("b", layer(1e-300 * i))])
        flow.add(f"img{i}", [{"name": "a", "gradient": {"norm": i / 7 or None}}])
    text = json.dumps({"s": stats.to_state(), "f": flow.to_state()})
    back = json.loads(text)
    again = RunningStats.from_state(back["s"])
    assert json.dumps(again.to_json(), allow_nan=True) == json.dumps(
        stats.to_json(), allow_nan=True
    )
    assert json.dumps(again.to_state()) == json.dumps(stats.to_state())
    flow_again = RunGradientFlow.from_state(back["f"])
    assert json.dumps(flow_again.to_state()) == json.dumps(flow.to_state())
    assert flow_again.describe() == flow.describe()
    # Folding on after the round trip equals folding on the original.
    for summary in (stats, again):
        summary.add_image("img9", [("a", layer(7.0)), ("b", layer(0.1))])
    assert json.dumps(again.to_state()) == json.dumps(stats.to_state())


def test_write_state_is_ascii_and_reads_back_non_finite_floats(tmp_path: Path) -> None:
    data = {"x": [float("nan"), float("inf"), 2**200], "name": "caf\u00e9 \udcff"}
    output.write_state(tmp_path / "s.json", data)
    raw = (tmp_path / "s.json").read_bytes()
    assert raw.isascii()
    back = json.loads(raw)
    assert back["x"][1] == float("inf") and back["x"][2] == 2**200 and back["name"] == data["name"]


def test_a_table_taken_up_from_its_checkpoint_equals_one_written_at_once(tmp_path: Path) -> None:
    from actviz.statistics import StatsTable
    from actviz.statistics.table import CSV_FILE, TABLE_FILE
    from tests.oracles import read_table_rows
    from tests.test_statistics_table import folder, write

    per_image = folder()
    images = list(per_image.items())
    write(tmp_path / "once", per_image, rows_per_group=2)
    out = tmp_path / "parts"
    table = StatsTable(out, rows_per_group=2)
    table.add(images[0][0], f"/in/{images[0][0]}.png", images[0][1], flag_anomalies(images[0][1]))
    state = table.checkpoint()
    table.add(images[1][0], "/in/lost.png", images[1][1], [])  # lost with the kill
    del table  # killed: neither finished nor aborted
    assert StatsTable.usable(out, state)
    assert not StatsTable.usable(out, {**state, "rows": state["rows"] + 1})
    assert not StatsTable.usable(out, {**state, "parts": ["../elsewhere.parquet"]})
    with StatsTable(out, rows_per_group=2, resume=state) as resumed:
        for image, layers in images[1:]:
            resumed.add(image, f"/in/{image}.png", layers, flag_anomalies(layers))
        run = aggregate_run(per_image)
        resumed.finish(run, flag_anomalies(run))
    assert read_table_rows(out / TABLE_FILE) == read_table_rows(tmp_path / "once" / TABLE_FILE)
    assert (out / CSV_FILE).read_bytes() == (tmp_path / "once" / CSV_FILE).read_bytes()
    assert sorted(p.name for p in out.iterdir()) == [CSV_FILE, TABLE_FILE]


def test_gradient_flow_resumes_from_the_checkpoint(
    photos: Path, tiny_model: str, tmp_path: Path, reads: list[int]
) -> None:
    out = tmp_path / "out"
    _stats_run(tiny_model, photos, out, grads=True, grids=True)
    before = json.loads((out / "stats.json").read_text())
    assert before["gradients"]["images"] == 24
    reads.clear()
    again = _stats_run(tiny_model, photos, out, grads=True, grids=True, resume=True)
    assert reads == [] and again.count("reused") == 24
    assert json.loads((out / "stats.json").read_text()) == before
    assert again.gradient_flow is not None and again.gradient_flow.is_file()
