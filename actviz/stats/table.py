"""The per-image table of a run's statistics, streamed: ``stats.parquet`` and ``stats.csv``.

One row per image and layer, in the order the images finished. :class:`StatsTable` writes each
image's rows as it comes, to temporary names in the output folder, holding at most one Parquet
row group in memory, and renames both files into place when the run ends; the CSV's ``(all)``
rows for the run come last. The Parquet columns are :func:`TABLE_SCHEMA`; the CSV's are
:data:`~actviz.stats.files.CSV_FIELDS`, byte for byte what :func:`~actviz.stats.files.to_csv`
writes for the same rows.

Numbers are those of :meth:`LayerStats.to_dict` (7 significant digits, non-finite as null): the
same in both files and in the run's records, so a table rebuilt from those records on resume
equals the one a clean run writes.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import operator
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.errors import OutputError, UsageError, first_line
from actviz.stats.layerstats import CSV_FIELDS, RUN_KEY, STAT_FIELDS, _json_float

if TYPE_CHECKING:
    import pyarrow as pa

    from actviz.stats.anomalies import Flag
    from actviz.stats.layerstats import LayerStats

__all__ = [
    "CSV_FILE",
    "TABLE_FILE",
    "TABLE_FORMAT",
    "TABLE_SCHEMA",
    "StatsTable",
    "read_table_rows",
]

TABLE_FILE = "stats.parquet"
"""The Parquet table's name in the output folder."""

CSV_FILE = "stats.csv"
"""The CSV's name in the output folder."""

TABLE_FORMAT = "1"
"""The ``actviz.format`` entry of the Parquet file's key-value metadata: changes when a column
changes meaning or type."""

# Each statistic's Arrow type, in STAT_FIELDS order.
_STAT_TYPES: dict[str, str] = {
    "count": "int64",
    "mean": "float64",
    "std": "float64",
    "min": "float64",
    "max": "float64",
    "p01": "float64",
    "p99": "float64",
    "zero_frac": "float64",
    "neg_frac": "float64",
    "nan": "int64",
    "inf": "int64",
    "channels": "int32",
    "dead_channels": "int32",
    "dead_frac": "float64",
}
# Zstandard at its default level: measured on 100,000 rows of 50-layer images, 6% smaller than
# snappy and written as fast (the time goes to building the rows, not to compressing them).
_COMPRESSION = "zstd"
_UNDECODED = "backslashreplace"  # as the CSV and JSON files hold a file name that is not UTF-8


def _arrow() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, or the error that says how to install them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UsageError(
            "the per-image table stats.parquet needs pyarrow, which is not installed: "
            "pip install pyarrow"
        ) from None
    return pyarrow, pyarrow.parquet


@functools.cache
def TABLE_SCHEMA() -> pa.Schema:  # a function: pyarrow is imported on first use
    """The Arrow schema of ``stats.parquet``, with its ``actviz.format`` metadata entry."""
    pa, _ = _arrow()
    fields = [
        pa.field("image", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("layer", pa.string(), nullable=False),
        pa.field("depth", pa.int32(), nullable=False),
    ]
    for name in STAT_FIELDS:
        kind = _STAT_TYPES[name]
        fields.append(pa.field(name, getattr(pa, kind)(), nullable=kind == "float64"))
    # Items named "element", as Parquet's nested lists name them: the schema reads back equal.
    fields += [
        pa.field("dead_indices", pa.list_(pa.field("element", pa.int32())), nullable=False),
        pa.field("flags", pa.list_(pa.field("element", pa.string())), nullable=False),
    ]
    return pa.schema(fields, metadata={"actviz.format": TABLE_FORMAT})


class StatsTable:
    """``stats.parquet`` and ``stats.csv`` of a run, written as its images finish.

    Use it as a context manager: leaving the block on an exception (an interrupt included)
    calls :meth:`abort`, leaving it normally without :meth:`finish` finishes without run rows.

    Args:
        out: The output folder.
        rows_per_group: Rows buffered before they are written as one Parquet row group: the
            memory the table holds, whatever the number of images.

    Attributes:
        rows: The rows added so far (the CSV's ``(all)`` rows not counted).

    Raises:
        OutputError: If the folder cannot be written.
        UsageError: If pyarrow is not installed.
    """

    def __init__(
        self,
        out: Path,
        *,
        rows_per_group: int = 16384,
        resume: Mapping[str, Any] | None = None,
    ) -> None:
        if rows_per_group < 1:
            raise ValueError(f"rows_per_group must be at least 1, not {rows_per_group}")
        _arrow()
        self.out = out
        self.rows_per_group = rows_per_group
        self.rows = int(resume["rows"]) if resume else 0
        # Complete Parquet files holding the rows before the current part's, in order.
        self._parts: list[str] = list(resume["parts"]) if resume else []
        self._part_rows = 0
        self._parquet_tmp = output.temp_beside(out / TABLE_FILE)
        self._csv_tmp = output.temp_beside(out / CSV_FILE)
        self._csv_rows_end = 0
        self._writer: Any = None
        self._fh: Any = None
        self._closed = False  # finished or aborted: no more rows
        self._finished = False  # both files in place
        self._clear()
        try:
            with _naming(out / CSV_FILE):
                out.mkdir(parents=True, exist_ok=True)
                keep = {*self._parts, resume["csv"]} if resume else set()
                _remove_leftovers(out, keep)
                # newline="": the csv module's "\n" goes to disk as is, as to_csv's text does.
                self._fh = self._csv_tmp.open("w", encoding="utf-8", errors=_UNDECODED, newline="")
                self._csv = csv.writer(self._fh, lineterminator="\n")
                if resume:
                    self._fh.flush()
                    _copy_start(out / resume["csv"], int(resume["csv_bytes"]), self._fh.buffer)
                else:
                    self._csv.writerow(CSV_FIELDS)
            self._open_part()
        except BaseException:
            self.abort()
            raise

    @staticmethod
    def usable(out: Path, state: Mapping[str, Any]) -> bool:
        """Whether a :meth:`checkpoint` of ``out`` can be resumed from: its parts are there,
        complete, with its number of rows, and its CSV is at least as long as it was."""
        try:
            names = [*state["parts"], state["csv"]]
            if not all(isinstance(n, str) and _ours(n) for n in names):
                return False  # never a file of the checkpoint's choosing outside the table's
            if (out / state["csv"]).stat().st_size < int(state["csv_bytes"]):
                return False
            _, pq = _arrow()
            rows = sum(pq.ParquetFile(str(out / part)).metadata.num_rows for part in state["parts"])
            return bool(rows == int(state["rows"]))
        except Exception:  # missing, torn or of another kind: the caller replays instead
            return False

    def checkpoint(self) -> dict[str, Any]:
        """Close the current part (a complete Parquet file) and start another, and sync the
        CSV: the table so far, as ``StatsTable(out, resume=...)`` takes it up again.

        Raises:
            OutputError: If a file cannot be written.
        """
        self._check_open()
        if self._layer:
            self._flush()
        with _naming(self.out / TABLE_FILE):
            self._writer.close()
            self._writer = None
            with self._parquet_tmp.open("rb") as part:  # on disk before a checkpoint names it
                os.fsync(part.fileno())
            self._parts.append(self._parquet_tmp.name)
            self._parquet_tmp = output.temp_beside(self.out / TABLE_FILE)
            self._open_part()
        with _naming(self.out / CSV_FILE):
            self._fh.flush()
            os.fsync(self._fh.fileno())
            size = os.fstat(self._fh.fileno()).st_size
        return {
            "parts": list(self._parts),
            "csv": self._csv_tmp.name,
            "csv_bytes": size,
            "rows": self.rows,
        }

    def finished_state(self) -> dict[str, Any]:
        """After :meth:`finish`: the finished files as :meth:`checkpoint` gives a table, the
        CSV's run rows left out."""
        return {
            "parts": [TABLE_FILE],
            "csv": CSV_FILE,
            "csv_bytes": self._csv_rows_end,
            "rows": self.rows,
        }

    def _open_part(self) -> None:
        _, pq = _arrow()
        with _naming(self.out / TABLE_FILE):
            self._writer = pq.ParquetWriter(
                str(self._parquet_tmp), TABLE_SCHEMA(), compression=_COMPRESSION
            )
        self._part_rows = 0

    def __enter__(self) -> StatsTable:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.finish(None, ())

    def add(
        self,
        image: str,
        path: str,
        layers: Sequence[tuple[str, LayerStats]],
        flags: Sequence[Flag],
    ) -> None:
        """Append one image's rows: one per layer, ``depth`` its index in ``layers``.

        Args:
            image: The image's key (its output folder, as posix text).
            path: The input file.
            layers: ``(layer, stats)`` in depth order.
            flags: The image's flags (from :func:`~actviz.stats.flag_anomalies`); a layer's
                ``flags`` are the kinds of those whose ``layer`` is its name, in order.

        Raises:
            OutputError: If a file cannot be written.
        """
        self._check_open()
        kinds = _kinds(flags)
        image_text, path_text = _utf8(image), _utf8(path)
        with _naming(self.out / CSV_FILE):  # the Parquet file's errors say so in _flush
            for depth, (name, s) in enumerate(layers):
                values = _values(s)
                layer_kinds = kinds.get(name, ())
                self._csv.writerow([image, name, *values, ";".join(layer_kinds)])
                self._image.append(image_text)
                self._path.append(path_text)
                self._layer.append(_utf8(name))
                self._depth.append(depth)
                # One C call for the row's numbers; counts are exact in a float64 below 2**53.
                self._numbers.extend(values if None not in values else _nan_for_none(values))
                self._dead.extend(s.dead_indices)
                self._dead_ends.append(len(self._dead))
                self._flags.extend(layer_kinds)
                self._flag_ends.append(len(self._flags))
                self.rows += 1
                if len(self._layer) >= self.rows_per_group:
                    self._flush()

    def finish(
        self, run: Sequence[tuple[str, LayerStats]] | None, run_flags: Sequence[Flag]
    ) -> None:
        """Write the CSV's ``(all)`` rows for ``run`` (not part of the Parquet table), close
        both files and rename them to ``stats.parquet`` and ``stats.csv``.

        Args:
            run: The run's pooled statistics per layer in depth order, or None for no such rows.
            run_flags: Their flags.

        Raises:
            OutputError: If a file cannot be written; the temporaries are removed.
        """
        self._check_open()
        self._closed = True
        try:
            with _naming(self.out / CSV_FILE):
                self._fh.flush()
                self._csv_rows_end = os.fstat(self._fh.fileno()).st_size
                if run is not None:
                    kinds = _kinds(run_flags)
                    for name, s in run:
                        flags = ";".join(kinds.get(name, ()))
                        self._csv.writerow([RUN_KEY, name, *_values(s), flags])
                self._fh.close()
            if self._layer:
                self._flush()
            with _naming(self.out / TABLE_FILE):
                self._writer.close()
                self._writer = None
                self._combine()
            with _naming(self.out / CSV_FILE):
                os.replace(self._csv_tmp, self.out / CSV_FILE)
        except BaseException:
            self.abort()
            raise
        self._finished = True
        self._fh = self._writer = None
        with contextlib.suppress(OSError):  # the parts now in stats.parquet
            _remove_leftovers(self.out, set())

    def _combine(self) -> None:
        """The parts and the current one into ``stats.parquet``: their row groups copied in
        order, or the one file renamed."""
        final = self.out / TABLE_FILE
        parts = [self.out / name for name in self._parts]
        if self._part_rows or not parts:
            parts.append(self._parquet_tmp)
        if parts == [final]:
            return  # nothing added to a finished table
        if len(parts) == 1:
            os.replace(parts[0], final)
            return
        _, pq = _arrow()
        combined = output.temp_beside(final)
        try:
            writer = pq.ParquetWriter(str(combined), TABLE_SCHEMA(), compression=_COMPRESSION)
            try:
                for part in parts:
                    parquet = pq.ParquetFile(str(part))
                    for group in range(parquet.num_row_groups):
                        rows = parquet.read_row_group(group)
                        writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
            finally:
                writer.close()
            os.replace(combined, final)
        finally:
            combined.unlink(missing_ok=True)

    def abort(self) -> None:
        """Close both files and remove the temporaries; the final names are left untouched.
        Does nothing once finished; twice is harmless."""
        if self._finished:
            return
        self._closed = True
        fh, writer = self._fh, self._writer
        self._fh = self._writer = None
        for closing in (fh, writer):
            if closing is not None:
                with contextlib.suppress(Exception):  # already failing: removing matters more
                    closing.close()
        parts = [self.out / name for name in self._parts if output.TMP_MARK in name]
        for tmp in (self._parquet_tmp, self._csv_tmp, *parts):
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"the statistics table of {self.out} is already closed")

    def _clear(self) -> None:
        """Empty buffers: names as Python lists (shared string objects), numbers packed."""
        self._image: list[str] = []
        self._path: list[str] = []
        self._layer: list[str] = []
        self._depth = array("i")
        self._numbers = array("d")  # the STAT_FIELDS of each row, one after the other
        self._dead = array("i")
        self._dead_ends = array("i")
        self._flags: list[str] = []
        self._flag_ends = array("i")

    def _flush(self) -> None:
        """Write the buffered rows as one row group, and empty the buffers."""
        import numpy as np

        pa, _ = _arrow()
        schema = TABLE_SCHEMA()
        columns = [
            pa.array(self._image, pa.string()),
            pa.array(self._path, pa.string()),
            pa.array(self._layer, pa.string()),
            pa.array(np.frombuffer(self._depth, np.int32)),
        ]
        numbers = np.frombuffer(self._numbers, np.float64).reshape(-1, len(STAT_FIELDS))
        for i, name in enumerate(STAT_FIELDS):
            kind = _STAT_TYPES[name]
            values = numbers[:, i].astype(kind)  # a contiguous copy of the column
            mask = np.isnan(values) if kind == "float64" else None
            columns.append(pa.array(values, schema.field(name).type, mask=mask))
        dead = pa.array(np.frombuffer(self._dead, np.int32))
        columns.append(_list_array(pa, np, self._dead_ends, dead))
        columns.append(_list_array(pa, np, self._flag_ends, pa.array(self._flags, pa.string())))
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        with _naming(self.out / TABLE_FILE):
            self._writer.write_batch(batch, row_group_size=len(self._layer))
        self._part_rows += len(self._layer)
        self._clear()


def read_table_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a ``stats.parquet`` as a dict (null -> None): for tests and small tables.

    Raises:
        OutputError: If the file cannot be read or was not written by this format.
    """
    pa, pq = _arrow()
    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowInvalid) as exc:
        raise OutputError(
            f"cannot read {path}: {first_line(exc)}; run the command again to write it"
        ) from None
    found = (table.schema.metadata or {}).get(b"actviz.format")
    if found != TABLE_FORMAT.encode():
        raise OutputError(
            f"{path} is not an actviz statistics table of format {TABLE_FORMAT} "
            f"(found {found!r}); run the command again to write it"
        )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


_NAN = float("nan")
_STATS_OF = operator.attrgetter(*STAT_FIELDS)  # one C call for the 14 numbers


def _values(s: LayerStats) -> list[Any]:
    """``[s.to_dict()[k] for k in STAT_FIELDS]``, without copying the whole dataclass: floats
    at 7 significant digits, non-finite ones None."""
    return [_json_float(v) if v.__class__ is float else v for v in _STATS_OF(s)]


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Turn an OS error in the block into the :class:`OutputError` that names ``path`` and
    the fix."""
    try:
        yield
    except OSError as exc:
        raise output.write_error(path, exc) from None


def _remove_leftovers(out: Path, keep: set[str]) -> None:
    """Remove the temporaries of a run that was killed before it could (SIGKILL, a power cut),
    but those in ``keep`` (a checkpoint's, resumed from): a large folder's would otherwise
    stay, hidden, beside every later table."""
    for name in (TABLE_FILE, CSV_FILE):
        for leftover in out.glob(f".{name}.*{output.TMP_MARK}"):
            if leftover.name not in keep:
                leftover.unlink(missing_ok=True)


def _ours(name: str) -> bool:
    """A name the table writes: a final file, or a temporary of one, in the output folder."""
    if name in (TABLE_FILE, CSV_FILE):
        return True
    return (
        "/" not in name
        and "\\" not in name
        and name.endswith(output.TMP_MARK)
        and name.startswith((f".{TABLE_FILE}.", f".{CSV_FILE}."))
    )


def _copy_start(path: Path, size: int, into: Any) -> None:
    """The first ``size`` bytes of ``path`` into the binary file ``into``."""
    with path.open("rb") as fh:
        left = size
        while left > 0:
            block = fh.read(min(left, 1 << 20))
            if not block:
                raise OSError(f"{path} is shorter than {size} bytes")
            into.write(block)
            left -= len(block)
    into.flush()


def _nan_for_none(values: list[Any]) -> list[Any]:
    return [_NAN if v is None else v for v in values]


def _kinds(flags: Sequence[Flag]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for flag in flags:
        kinds.setdefault(flag.layer, []).append(flag.kind)
    return kinds


def _utf8(text: str) -> str:
    """Text Arrow can store: a lone surrogate (a file name that is not UTF-8) as the escape
    the CSV holds."""
    if text.isascii():
        return text
    return text.encode("utf-8", _UNDECODED).decode("utf-8")


def _list_array(pa: Any, np: Any, ends: array[int], values: Any) -> Any:
    """A list column from each row's end offset into ``values``."""
    offsets = np.concatenate([np.zeros(1, np.int32), np.frombuffer(ends, np.int32)])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)
