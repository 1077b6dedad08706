"""Tables written as a run goes: a text file (a CSV) and a Parquet file, each under temporary
names beside its final one, synced at checkpoints so that a resume takes them up again, and
renamed into place when the run ends.

pyarrow is imported only here and only when a Parquet table is written; the caller checks it is
installed and builds the record batches.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from actviz.output.files import TMP_MARK, UNDECODED, temp_beside, write_error

__all__ = ["ParquetParts", "TextPart", "naming"]


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """Turn an OS error in the block into the :class:`~actviz.errors.OutputError` that names
    ``path`` and the fix."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc) from None


class TextPart:
    """A text file written under a temporary name beside ``final`` (UTF-8, ``\\n`` as given,
    an undecodable file name as its escape), renamed into place by :meth:`commit`.

    Args:
        final: Its final name.
        start: ``(name, size)``: start with the first ``size`` bytes of the file ``name``
            beside it (a checkpoint's, resumed from).

    Raises:
        OutputError: If it cannot be written.
    """

    def __init__(self, final: Path, *, start: tuple[str, int] | None = None) -> None:
        self.final = final
        self.tmp = temp_beside(final)
        with naming(final):
            final.parent.mkdir(parents=True, exist_ok=True)
            self.file: IO[str] = self.tmp.open("w", encoding="utf-8", errors=UNDECODED, newline="")
            if start is not None:
                self.file.flush()
                _copy_start(final.parent / start[0], start[1], self.file.buffer)

    def size(self, *, sync: bool = False) -> int:
        """Its length so far, flushed (and synced to disk with ``sync``)."""
        with naming(self.final):
            self.file.flush()
            if sync:
                os.fsync(self.file.fileno())
            return os.fstat(self.file.fileno()).st_size

    def commit(self) -> None:
        """Close it and rename it to its final name."""
        with naming(self.final):
            self.file.close()
            os.replace(self.tmp, self.final)

    def discard(self) -> None:
        """Close it and remove it (never failing: the caller is already handling a failure)."""
        with contextlib.suppress(Exception):
            self.file.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


class ParquetParts:
    """A Parquet file written in parts: complete Parquet files under temporary names beside
    ``final``, the current one closed at each :meth:`cut` (a checkpoint names the parts), all
    combined into ``final`` by :meth:`finish`.

    Args:
        final: Its final name.
        schema: The Arrow schema of every part.
        compression: Parquet's compression.
        parts: The complete parts of a checkpoint, resumed from (names beside ``final``).

    Raises:
        OutputError: If it cannot be written.
    """

    def __init__(
        self, final: Path, schema: Any, *, compression: str, parts: Sequence[str] = ()
    ) -> None:
        self.final = final
        self.schema = schema
        self.compression = compression
        self.parts = list(parts)
        self.tmp = temp_beside(final)
        self.rows = 0  # in the current part
        self._writer: Any = None
        self._open()

    def _open(self) -> None:
        import pyarrow.parquet as pq

        with naming(self.final):
            self._writer = pq.ParquetWriter(
                str(self.tmp), self.schema, compression=self.compression
            )
        self.rows = 0

    def write(self, batch: Any) -> None:
        """Write a record batch as one row group."""
        with naming(self.final):
            self._writer.write_batch(batch, row_group_size=batch.num_rows)
        self.rows += batch.num_rows

    def cut(self) -> list[str]:
        """Close the current part (synced to disk before a checkpoint names it) and start
        another.

        Returns:
            The names of the complete parts, in order.
        """
        with naming(self.final):
            self._writer.close()
            self._writer = None
            with self.tmp.open("rb") as part:
                os.fsync(part.fileno())
        self.parts.append(self.tmp.name)
        self.tmp = temp_beside(self.final)
        self._open()
        return list(self.parts)

    def finish(self) -> None:
        """Close the current part and combine the parts into the final file: their row groups
        copied in order, or the one file renamed."""
        with naming(self.final):
            self._writer.close()
            self._writer = None
            parts = [self.final.parent / name for name in self.parts]
            if self.rows or not parts:
                parts.append(self.tmp)
            if parts == [self.final]:
                return  # nothing added to a finished table
            if len(parts) == 1:
                os.replace(parts[0], self.final)
                return
            self._combine(parts)

    def _combine(self, parts: list[Path]) -> None:
        import pyarrow.parquet as pq

        combined = temp_beside(self.final)
        try:
            writer = pq.ParquetWriter(str(combined), self.schema, compression=self.compression)
            try:
                for part in parts:
                    parquet = pq.ParquetFile(str(part))
                    for group in range(parquet.num_row_groups):
                        rows = parquet.read_row_group(group)
                        writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
            finally:
                writer.close()
            os.replace(combined, self.final)
        finally:
            combined.unlink(missing_ok=True)

    def abort(self) -> None:
        """Close the current part and remove every temporary part (never failing)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):  # already failing: removing matters more
                writer.close()
        parts = [self.final.parent / name for name in self.parts if TMP_MARK in name]
        for tmp in (self.tmp, *parts):
            with contextlib.suppress(OSError):
                tmp.unlink()

    @staticmethod
    def count_rows(folder: Path, names: Sequence[str]) -> int:
        """The rows of the Parquet files ``names`` in ``folder`` (errors as pyarrow raises
        them: a missing or torn part)."""
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(str(folder / name)).metadata.num_rows for name in names)


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
