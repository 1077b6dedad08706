"""The per-image table of a run's statistics, streamed: ``stats.parquet`` and ``stats.csv``.

One row per image and layer, in the order the images finished. :class:`StatsTable` writes each
image's rows as it comes, to temporary names in the output folder, holding at most one Parquet
row group in memory, and renames both files into place when the run ends; the CSV's ``(all)``
rows for the run come last. The Parquet columns are :func:`TABLE_SCHEMA`; the CSV's are
:data:`~actviz.statistics.layerstats.CSV_FIELDS`, byte for byte what the plain CSV writer in the
tests writes for the same rows.

Numbers are those of :meth:`LayerStats.to_dict` (7 significant digits, non-finite as null): the
same in both files and in the run's records, so a table rebuilt from those records on resume
equals the one a clean run writes.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.util
import operator
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.errors import UsageError
from actviz.output import ParquetParts, TextPart, naming
from actviz.statistics.layerstats import CSV_FIELDS, RUN_KEY, STAT_FIELDS, _json_float

if TYPE_CHECKING:
    import pyarrow as pa

    from actviz.statistics.anomalies import Flag
    from actviz.statistics.layerstats import LayerStats

__all__ = [
    "CSV_FILE",
    "TABLE_FILE",
    "TABLE_FORMAT",
    "TABLE_SCHEMA",
    "StatsTable",
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


_MISSING = (
    "the per-image table stats.parquet needs pyarrow, which is not installed: pip install pyarrow"
)


def _arrow() -> Any:
    """``pyarrow``, or the error that says how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise UsageError(_MISSING) from None
    return pyarrow


def _check_arrow() -> None:
    """Refuse at once when pyarrow is missing, without importing it: its import (0.2 s and
    28 MiB resident after torch, on a 2-core machine) waits for the table's first row group."""

    if importlib.util.find_spec("pyarrow") is None:
        raise UsageError(_MISSING)


@functools.cache
def TABLE_SCHEMA() -> pa.Schema:  # a function: pyarrow is imported on first use
    """The Arrow schema of ``stats.parquet``, with its ``actviz.format`` metadata entry."""
    pa = _arrow()
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
        _check_arrow()
        self.out = out
        self.rows_per_group = rows_per_group
        self.rows = int(resume["rows"]) if resume else 0
        self._csv: TextPart | None = None
        self._parquet: ParquetParts | None = None
        self._parts: list[str] = []  # a resumed checkpoint's complete parts
        self._csv_rows_end = 0
        self._closed = False  # finished or aborted: no more rows
        self._finished = False  # both files in place
        self._clear()
        try:
            with naming(out / CSV_FILE):
                keep = {*resume["parts"], resume["csv"]} if resume else set()
                output.remove_temporaries(out, (TABLE_FILE, CSV_FILE), keep)
            start = (resume["csv"], int(resume["csv_bytes"])) if resume else None
            self._csv = TextPart(out / CSV_FILE, start=start)
            # The csv module's "\n" goes to disk as is, as to_csv's text does.
            self._writer = csv.writer(self._csv.file, lineterminator="\n")
            if not resume:
                with naming(out / CSV_FILE):
                    self._writer.writerow(CSV_FIELDS)
            # The Parquet file (and pyarrow) is opened when the first row group is written.
            self._parts = list(resume["parts"]) if resume else []
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
            return ParquetParts.count_rows(out, state["parts"]) == int(state["rows"])
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
        assert self._csv is not None
        parts = self._parquet_parts().cut()
        return {
            "parts": parts,
            "csv": self._csv.tmp.name,
            "csv_bytes": self._csv.size(sync=True),
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
            flags: The image's flags (from :func:`~actviz.statistics.flag_anomalies`); a layer's
                ``flags`` are the kinds of those whose ``layer`` is its name, in order.

        Raises:
            OutputError: If a file cannot be written.
        """
        self._check_open()
        kinds = _kinds(flags)
        image_text, path_text = _utf8(image), _utf8(path)
        with naming(self.out / CSV_FILE):  # the Parquet file's errors say so in _flush
            for depth, (name, s) in enumerate(layers):
                values = _values(s)
                layer_kinds = kinds.get(name, ())
                self._writer.writerow([image, name, *values, ";".join(layer_kinds)])
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
        assert self._csv is not None
        try:
            self._csv_rows_end = self._csv.size()
            if run is not None:
                kinds = _kinds(run_flags)
                with naming(self.out / CSV_FILE):
                    for name, s in run:
                        flags = ";".join(kinds.get(name, ()))
                        self._writer.writerow([RUN_KEY, name, *_values(s), flags])
            if self._layer:
                self._flush()
            self._parquet_parts().finish()
            self._csv.commit()
        except BaseException:
            self.abort()
            raise
        self._finished = True
        with contextlib.suppress(OSError):  # the parts now in stats.parquet
            output.remove_temporaries(self.out, (TABLE_FILE, CSV_FILE))

    def abort(self) -> None:
        """Close both files and remove the temporaries; the final names are left untouched.
        Does nothing once finished; twice is harmless."""
        if self._finished:
            return
        self._closed = True
        csv_file, parquet = self._csv, self._parquet
        self._csv = self._parquet = None
        if csv_file is not None:
            csv_file.discard()
        if parquet is not None:
            parquet.abort()
        else:  # never opened: a resumed checkpoint's parts are all there is
            output.discard_files(self.out, [n for n in self._parts if output.TMP_MARK in n])
        self._parts = []
        self._clear()

    def _parquet_parts(self) -> ParquetParts:
        """The Parquet file's parts, opened on first use."""
        if self._parquet is None:
            self._parquet = ParquetParts(
                self.out / TABLE_FILE, TABLE_SCHEMA(), compression=_COMPRESSION, parts=self._parts
            )
        return self._parquet

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

        pa = _arrow()
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
        self._parquet_parts().write(pa.RecordBatch.from_arrays(columns, schema=schema))
        self._clear()


_NAN = float("nan")
_STATS_OF = operator.attrgetter(*STAT_FIELDS)  # one C call for the 14 numbers


def _values(s: LayerStats) -> list[Any]:
    """``[s.to_dict()[k] for k in STAT_FIELDS]``, without copying the whole dataclass: floats
    at 7 significant digits, non-finite ones None."""
    return [_json_float(v) if v.__class__ is float else v for v in _STATS_OF(s)]


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
    return text.encode("utf-8", output.UNDECODED).decode("utf-8")


def _list_array(pa: Any, np: Any, ends: array[int], values: Any) -> Any:
    """A list column from each row's end offset into ``values``."""
    offsets = np.concatenate([np.zeros(1, np.int32), np.frombuffer(ends, np.int32)])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)
