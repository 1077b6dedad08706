"""The one append-only journal under every ledger, log and resume state.

A journal is a file of lines (JSON, as its owner writes them) that only grows while a command
runs:

- each line is one write handed to the operating system at once, so a killed process loses
  nothing it appended, and synced to disk at most every :attr:`Journal.SYNC_SECONDS` and when
  asked (a sync per line would cost more than a small image's work);
- a line cut short by an interruption is never read as one (:func:`whole`), and the next
  writer starts on a fresh line, or, opened at the length a saved state covers, cuts the file
  back to it;
- :meth:`Journal.sync` gives the covered length: every line below it is complete and on disk,
  so a state saved after it (a checkpoint naming that length) belongs with exactly those lines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from actviz.errors import OutputError
from actviz.output.files import write_error

__all__ = ["Journal", "whole"]


def whole(line: bytes) -> bool:
    """Whether a line read from a journal is complete (the last may be cut short)."""
    return line.endswith(b"\n")


class Journal:
    """An append-only file of lines, kept open while it is appended to (it reopens when
    appended to after :meth:`close`).

    Args:
        path: The file.
        first: The line a new (or empty) journal starts with.
        keep: The length a loaded state covers: the file is cut back to it when first appended
            to, dropping the lines no saved state covers. None keeps every line.
        sync_seconds: Longest time between syncs to disk while appending; None for none but
            those of :meth:`sync` and :meth:`close`.
        error: The error for an OS error on the file, naming the fix.
    """

    SYNC_SECONDS = 2.0

    def __init__(
        self,
        path: Path,
        *,
        first: bytes = b"",
        keep: int | None = None,
        sync_seconds: float | None = SYNC_SECONDS,
        error: Callable[[Path, OSError], OutputError] = write_error,
    ) -> None:
        self.path = path
        self.first = first
        self.keep = keep
        self.sync_seconds = sync_seconds
        self.error = error
        #: The file's length after the last line appended (counted, not asked: ``tell()`` on
        #: a file opened for appending costs a system call, a millisecond a line).
        self.size = keep or 0
        self._fh: IO[bytes] | None = None
        self._synced = time.monotonic()

    def open(self) -> None:
        """Open the file for appending now (it opens on the first :meth:`append` otherwise).

        Raises:
            OutputError: If it cannot be opened.
        """
        if self._fh is not None:
            return
        keep = self.keep
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            start = self._start() if keep is None else b""
            mode = "ab" if keep is None else "r+b" if self.path.exists() else "w+b"
            fh = self.path.open(mode)
            try:
                if keep is not None:
                    fh.truncate(keep)  # lines no saved state covers are dropped
                    self.size = fh.seek(keep)
                else:
                    fh.write(start)
                    fh.flush()
                    self.size = fh.seek(0, os.SEEK_END)
            except BaseException:
                fh.close()
                raise
        except OSError as exc:
            raise self.error(self.path, exc) from None
        self.keep = None  # what follows is this run's: kept when reopened
        self._fh = fh

    def _start(self) -> bytes:
        """What goes before the first line appended: the first line of a new journal, or a
        line break after a line cut short."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return self.first
        with self.path.open("rb") as tail:
            tail.seek(-1, os.SEEK_END)
            return b"" if tail.read(1) == b"\n" else b"\n"

    def append(self, line: bytes) -> int:
        """Append one whole line (ending in ``\\n``) as one write.

        Returns:
            The byte offset where it starts.

        Raises:
            OutputError: If it cannot be written.
        """
        self.open()
        fh = self._fh
        assert fh is not None
        offset = self.size
        try:
            fh.write(line)
            fh.flush()
            self.size += len(line)
            if (
                self.sync_seconds is not None
                and time.monotonic() - self._synced > self.sync_seconds
            ):
                os.fsync(fh.fileno())
                self._synced = time.monotonic()
        except OSError as exc:
            raise self.error(self.path, exc) from None
        return offset

    def sync(self) -> int:
        """Sync what was appended to disk.

        Returns:
            The covered length: every line below it is complete and on disk (the file's length
            when it is not open).

        Raises:
            OutputError: If it cannot be synced.
        """
        fh = self._fh
        if fh is None:
            return self.path.stat().st_size if self.path.exists() else 0
        try:
            fh.flush()
            os.fsync(fh.fileno())
            self._synced = time.monotonic()
        except OSError as exc:
            raise self.error(self.path, exc) from None
        return self.size

    def close(self) -> None:
        """Sync what was appended to disk and close the file.

        Raises:
            OutputError: If it cannot be synced (the file is closed all the same).
        """
        if self._fh is None:
            return
        fh, self._fh = self._fh, None
        try:
            fh.flush()
            os.fsync(fh.fileno())
        except OSError as exc:
            raise self.error(self.path, exc) from None
        finally:
            fh.close()

    def covers(self, length: int) -> bool:
        """Whether the file on disk holds at least ``length`` bytes (a saved state's covered
        length): False when it is missing."""
        try:
            return 0 <= length <= self.path.stat().st_size
        except OSError:
            return False

    def lines(self, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of every line, read in large blocks; with ``end``, only the bytes
        below it. The last line may be cut short: :func:`whole` tells.

        Raises:
            OutputError: If the file cannot be read.
        """
        if not self.path.exists():
            return
        offset = 0
        try:
            with self.path.open("rb", buffering=1 << 20) as fh:
                for line in fh:
                    if end is not None and offset + len(line) > end:
                        if offset < end:
                            yield offset, line[: end - offset]
                        return
                    yield offset, line
                    offset += len(line)
        except OSError as exc:
            raise self.error(self.path, exc) from None
