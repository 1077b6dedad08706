"""Tests of actviz.statistics.table: the streamed per-image table, stats.parquet and stats.csv."""

from __future__ import annotations

import errno
import functools
import gc
import math
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from actviz.errors import OutputError, UsageError
from actviz.statistics import RUN_KEY, STAT_FIELDS, Flag, LayerStats, flag_anomalies
from actviz.statistics.table import (
    CSV_FILE,
    TABLE_FILE,
    TABLE_SCHEMA,
    StatsTable,
)
from tests.conftest import layer_stats
from tests.oracles import aggregate_run, read_table_rows, stats_rows, to_csv

NAN = float("nan")
INF = float("inf")


# A hand-made summary; its default mean needs rounding to 7 significant digits.
layer = functools.partial(
    layer_stats, mean=0.123456789, per_channel=9, tails=1.9, zero_frac=1 / 3, neg_frac=0.25
)


def folder() -> dict[str, list[tuple[str, LayerStats]]]:
    """Three images: a dead layer, a NaN layer whose floats are all NaN, an Inf, odd names."""
    return {
        "cat": [("conv", layer(dead=(0, 2, 3))), ("fc", layer(channels=3, per_channel=1))],
        'sub/dog, "quoted"': [
            ("conv", layer(mean=NAN, std=NAN, nan=36)),
            ("fc", layer(mean=2.5, channels=3, per_channel=1)),
        ],
        "é/bird": [("conv", layer(mean=-1e-30, inf=2)), ("fc", layer(channels=3, per_channel=1))],
    }


def write(out: Path, per_image: dict[str, list[tuple[str, LayerStats]]], **kw: int) -> StatsTable:
    with StatsTable(out, **kw) as table:
        for key, layers in per_image.items():
            table.add(key, f"/in/{key}.png", layers, flag_anomalies(layers))
        run = aggregate_run(per_image)
        table.finish(run, flag_anomalies(run))
    return table


def expected_row(image: str, depth: int, name: str, s: LayerStats, flags: list[str]) -> dict:  # type: ignore[type-arg]
    data = s.to_dict()
    return {
        "image": image,
        "path": f"/in/{image}.png",
        "layer": name,
        "depth": depth,
        **{key: data[key] for key in STAT_FIELDS},
        "dead_indices": list(s.dead_indices),
        "flags": flags,
    }


def test_rows_equal_the_statistics_fed_in(tmp_path: Path) -> None:
    per_image = folder()
    table = write(tmp_path, per_image)
    rows = read_table_rows(tmp_path / TABLE_FILE)
    expected = []
    for image, layers in per_image.items():
        kinds = {
            name: [f.kind for f in flag_anomalies(layers) if f.layer == name] for name, _ in layers
        }
        expected += [expected_row(image, d, n, s, kinds[n]) for d, (n, s) in enumerate(layers)]
    assert rows == expected
    assert table.rows == 6
    # Rounded as in stats.json, NaN as null, Inf counted, dead channels listed.
    assert rows[0]["mean"] == 0.1234568 and rows[0]["zero_frac"] == 0.3333333
    assert rows[0]["dead_indices"] == [0, 2, 3] and rows[0]["dead_frac"] == 0.75
    assert rows[2]["mean"] is None and rows[2]["p99"] is None and rows[2]["nan"] == 36
    assert rows[4]["inf"] == 2 and rows[4]["mean"] == -1e-30
    assert [r["depth"] for r in rows] == [0, 1] * 3
    # Statistics read back from a record (as a resumed run's reused images) give the same rows.
    again = {
        key: [(name, LayerStats.from_dict(s.to_dict())) for name, s in layers]
        for key, layers in per_image.items()
    }
    write(tmp_path / "resumed", again)
    assert read_table_rows(tmp_path / "resumed" / TABLE_FILE) == rows
    # The image rows; the "(all)" rows pool other inputs (rounded ones) and may differ.
    lines = (tmp_path / CSV_FILE).read_text().splitlines()
    assert (tmp_path / "resumed" / CSV_FILE).read_text().splitlines()[:-2] == lines[:-2]


def test_schema_types_and_format_entry(tmp_path: Path) -> None:
    write(tmp_path, folder())
    parquet = pq.ParquetFile(tmp_path / TABLE_FILE)
    schema = parquet.schema_arrow
    assert schema.equals(TABLE_SCHEMA(), check_metadata=True)
    assert schema.metadata[b"actviz.format"] == b"1"
    assert parquet.metadata.metadata[b"actviz.format"] == b"1"
    assert schema.names == [
        "image",
        "path",
        "layer",
        "depth",
        *STAT_FIELDS,
        "dead_indices",
        "flags",
    ]
    assert schema.field("depth").type == pa.int32()
    assert schema.field("count").type == pa.int64() and schema.field("nan").type == pa.int64()
    assert schema.field("channels").type == pa.int32()
    assert schema.field("dead_channels").type == pa.int32()
    assert schema.field("mean").type == pa.float64() and schema.field("mean").nullable
    assert schema.field("dead_indices").type.value_type == pa.int32()
    assert schema.field("flags").type.value_type == pa.string()
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


def test_flags_column_lists_each_layers_kinds_in_order(tmp_path: Path) -> None:
    flags = [
        Flag("b", "nan", "..."),
        Flag("a", "dead", "..."),
        Flag("b", "dead", "..."),
        Flag("elsewhere", "inf", "..."),  # a layer the image does not have: in no row
    ]
    with StatsTable(tmp_path) as table:
        table.add("x", "x.png", [("a", layer()), ("b", layer()), ("c", layer())], flags)
    rows = read_table_rows(tmp_path / TABLE_FILE)
    assert [(r["layer"], r["flags"]) for r in rows] == [
        ("a", ["dead"]),
        ("b", ["nan", "dead"]),
        ("c", []),
    ]
    csv_rows = (tmp_path / CSV_FILE).read_text().splitlines()
    assert [line.rsplit(",", 1)[1] for line in csv_rows[1:]] == ["dead", "nan;dead", ""]


def test_rows_are_written_in_row_groups_as_they_come(tmp_path: Path) -> None:
    per_image = {f"img{i}": [(f"l{j}", layer(mean=i + j / 10)) for j in range(5)] for i in range(3)}
    write(tmp_path, per_image, rows_per_group=4)
    parquet = pq.ParquetFile(tmp_path / TABLE_FILE)
    assert parquet.num_row_groups == 4
    assert [parquet.metadata.row_group(g).num_rows for g in range(4)] == [4, 4, 4, 3]
    rows = read_table_rows(tmp_path / TABLE_FILE)
    assert [(r["image"], r["layer"]) for r in rows] == [
        (f"img{i}", f"l{j}") for i in range(3) for j in range(5)
    ]
    assert [r["mean"] for r in rows] == [round(i + j / 10, 7) for i in range(3) for j in range(5)]


def test_a_group_is_written_before_the_run_ends(tmp_path: Path) -> None:
    with StatsTable(tmp_path, rows_per_group=2) as table:
        table.add("a", "a.png", [("l0", layer()), ("l1", layer()), ("l2", layer())], [])
        # Two rows are out of memory already; only the third waits in the buffer.
        assert len(table._layer) == 1
        assert not (tmp_path / TABLE_FILE).exists()


def test_pyarrow_alone_reads_and_filters_the_table(tmp_path: Path) -> None:
    write(tmp_path, folder())
    table = pq.read_table(tmp_path / TABLE_FILE, columns=["image", "layer", "mean", "flags"])
    dead = table.filter(pc.greater(pc.list_value_length(table["flags"]), 0))
    assert dead.column("image").to_pylist() == ["cat", 'sub/dog, "quoted"', "é/bird"]
    conv = table.filter(pc.equal(table["layer"], "conv"))
    assert conv.column("mean").null_count == 1
    assert pc.max(conv["mean"]).as_py() == 0.1234568


def test_pandas_reads_the_table(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    write(tmp_path, folder())
    frame = pd.read_parquet(tmp_path / TABLE_FILE)
    assert list(frame.columns) == TABLE_SCHEMA().names
    assert len(frame) == 6 and math.isnan(frame["mean"][2])
    assert frame.groupby("layer")["nan"].sum().to_dict() == {"conv": 36, "fc": 0}
    flagged = frame[frame["flags"].str.len() > 0]  # as docs/outputs.md shows it
    assert flagged["layer"].tolist() == ["conv"] * 3


def test_duckdb_reads_the_table(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    write(tmp_path, folder())
    path = (tmp_path / TABLE_FILE).as_posix()
    got = duckdb.sql(f"SELECT layer, sum(nan) FROM '{path}' GROUP BY layer ORDER BY layer")
    assert got.fetchall() == [("conv", 36), ("fc", 0)]


def test_polars_reads_the_table(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    write(tmp_path, folder())
    frame = pl.read_parquet(tmp_path / TABLE_FILE)
    assert frame.height == 6 and frame["mean"].null_count() == 1


def test_csv_is_byte_identical_to_to_csv(tmp_path: Path) -> None:
    per_image = folder()
    per_image["odd\udcff"] = [("conv", layer()), ("fc", layer(channels=3, per_channel=1))]
    write(tmp_path, per_image)
    run = aggregate_run(per_image)
    expected = to_csv(stats_rows(per_image, run)).encode("utf-8", "backslashreplace")
    assert (tmp_path / CSV_FILE).read_bytes() == expected
    lines = expected.decode().splitlines()
    assert [line.split(",")[0] for line in lines[-2:]] == [RUN_KEY, RUN_KEY]
    # The Parquet table holds the same escape for the name that is not UTF-8, and no run rows.
    images = [r["image"] for r in read_table_rows(tmp_path / TABLE_FILE)]
    assert images[-1] == "odd\\udcff" and RUN_KEY not in images


def test_empty_table_and_no_run_rows(tmp_path: Path) -> None:
    with StatsTable(tmp_path) as table:
        table.finish(None, [])
    assert (tmp_path / CSV_FILE).read_bytes() == to_csv([]).encode()
    assert read_table_rows(tmp_path / TABLE_FILE) == []
    assert pq.ParquetFile(tmp_path / TABLE_FILE).schema_arrow.equals(TABLE_SCHEMA())


def test_leaving_the_block_normally_finishes_without_run_rows(tmp_path: Path) -> None:
    per_image = folder()
    with StatsTable(tmp_path) as table:
        for key, layers in per_image.items():
            table.add(key, f"/in/{key}.png", layers, flag_anomalies(layers))
    assert (tmp_path / CSV_FILE).read_text() == to_csv(stats_rows(per_image))
    assert len(read_table_rows(tmp_path / TABLE_FILE)) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [CSV_FILE, TABLE_FILE]


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    table = StatsTable(tmp_path, rows_per_group=1)
    table.add("a", "a.png", [("l0", layer()), ("l1", layer())], [])
    assert len(list(tmp_path.iterdir())) == 2  # the two temporaries, hidden
    table.abort()
    table.abort()  # twice is harmless
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="already closed"):
        table.add("b", "b.png", [("l0", layer())], [])


def test_an_exception_in_the_block_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / CSV_FILE).write_text("an earlier run's\n")
    with pytest.raises(KeyboardInterrupt), StatsTable(tmp_path, rows_per_group=2) as table:
        table.add("a", "a.png", [("l0", layer()), ("l1", layer()), ("l2", layer())], [])
        raise KeyboardInterrupt
    # The temporaries are gone; a file already there is neither replaced nor removed.
    assert [p.name for p in tmp_path.iterdir()] == [CSV_FILE]
    assert (tmp_path / CSV_FILE).read_text() == "an earlier run's\n"


def test_an_unwritable_folder_names_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="choose another out"):
        StatsTable(blocker)


def test_a_full_disk_names_the_file_and_the_fix(tmp_path: Path) -> None:
    table = StatsTable(tmp_path, rows_per_group=2)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    table._parquet_parts()._writer.write_batch = full
    with pytest.raises(OutputError, match=r"stats\.parquet: No space left.*free some space"):
        table.add("a", "a.png", [("l0", layer()), ("l1", layer())], [])
    table.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_runs_temporaries_are_removed(tmp_path: Path) -> None:
    killed = StatsTable(tmp_path)
    killed.add("a", "a.png", [("l0", layer())], [])
    del killed  # never finished nor aborted, as after SIGKILL
    (tmp_path / ".other.actviz-tmp").write_text("not the table's")
    write(tmp_path, folder())
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".other.actviz-tmp", CSV_FILE, TABLE_FILE]


def test_a_file_of_another_format_is_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / TABLE_FILE)
    with pytest.raises(OutputError, match="not an actviz statistics table"):
        read_table_rows(tmp_path / TABLE_FILE)
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(OutputError, match="run the command again"):
        read_table_rows(tmp_path / "broken.parquet")


def test_without_pyarrow_the_error_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(UsageError, match="pip install pyarrow"):
        StatsTable(tmp_path)
    assert list(tmp_path.iterdir()) == []


_LAZY = """
import sys
from pathlib import Path
from actviz.statistics import LayerStats
from actviz.statistics.table import StatsTable

out = Path(sys.argv[1])
row = [("conv", LayerStats(36, 0.5, 1.0, -1.0, 2.0, -0.9, 1.9, 0.0, 0.25, 0, 0, 4, 0, 0.0))]
table = StatsTable(out, rows_per_group=3)
table.add("a", "a.png", row, [])
table.add("b", "b.png", row, [])
before = "pyarrow" in sys.modules
table.add("c", "c.png", row, [])  # the third row fills the first row group
print(before, "pyarrow" in sys.modules)
table.finish(None, [])
"""


def test_pyarrow_is_imported_when_the_first_row_group_is_written(tmp_path: Path) -> None:
    import subprocess

    script = tmp_path / "lazy.py"
    script.write_text(_LAZY)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "True"]
    assert pq.read_table(out / TABLE_FILE).column("image").to_pylist() == ["a", "b", "c"]


def peak_bytes(out: Path, rows: int) -> int:
    """tracemalloc's peak while ``rows`` rows (20 layers an image) stream through a table.

    Most layers are empty, their numbers NaN, so that they cost no decimal formatting: traced,
    every allocation of 50,000 rows' rounding would take the test's whole time budget, and the
    buffers hold a NaN in the same 8 bytes as any other number.
    """
    empty = LayerStats(0, *[NAN] * 8, 0, 0, 4, 0, NAN)
    layers = [
        (f"layer{j}", layer(mean=j * 0.37, dead=(1, 3)) if j % 10 == 0 else empty)
        for j in range(20)
    ]
    flags = [Flag("layer10", "dead", "...")]
    gc.collect()
    tracemalloc.start()
    try:
        with StatsTable(out, rows_per_group=1024) as table:
            for i in range(rows // len(layers)):
                table.add(f"images/{i:06d}", f"/data/images/{i:06d}.png", layers, flags)
            table.finish(None, [])
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_rows(tmp_path: Path) -> None:
    peak_bytes(tmp_path / "warm", 1024)  # imports, the cached schema
    # Five row groups, then about fifty: 45,000 rows more. A Python object kept per row (16
    # bytes or more) would add 720 kB or more, over 1.5x the small run's peak of about 450 kB;
    # a bare byte per row 45 kB, 10%, at the bound (the two peaks differ by under 1% here).
    small = peak_bytes(tmp_path / "small", 5_000)
    large = peak_bytes(tmp_path / "large", 50_000)
    assert large / small < 1.1, (small, large)
    assert pq.ParquetFile(tmp_path / "large" / TABLE_FILE).metadata.num_rows == 50_000
