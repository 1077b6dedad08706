"""The resume ledger of a command that scores or draws images one by one (``cam-eval``,
``attribute``, ``ablate``): a journal whose first line is the settings, then one JSON line per
image done; and how any command's journal is read back after its settings line
(:func:`journal_records`: label's, tcav's and atlas's too).

With ``--resume`` the images an earlier run with the same settings finished are read back and
skipped; other settings, or a folder that holds files but no such ledger, are refused (going
on there would mix two runs' files). A line cut short by a kill is left out, also once a later
run has ended it with a line break (which makes it look whole). The settings go first with the
first record, so a command that fails before any image leaves no ledger behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from actviz import output
from actviz.command.resume import check_settings
from actviz.errors import UsageError

__all__ = ["ImageLedger", "image_key", "journal_records", "line", "resumable"]


class ImageLedger:
    """One command's ledger in its output folder.

    Args:
        out: The output folder.
        name: The ledger's file name (``cam-eval.jsonl``).
        command: The command, for messages (``cam-eval``).
        settings: What a resumed run must share with the earlier one (JSON-ready).
        key: A record's key among the records read back (None: it is not read back); by
            default its image's, for a record of an image done.
    """

    def __init__(
        self,
        out: Path,
        name: str,
        *,
        command: str,
        settings: Mapping[str, Any],
        key: Callable[[Mapping[str, Any]], str | None] | None = None,
    ) -> None:
        self.path = out / name
        self.out = out
        self.command = command
        self.settings = dict(settings)
        self.key = key or image_key
        self._journal: output.Journal | None = None
        self._head: list[bytes] = []

    def read(self, resume: bool) -> dict[str, dict[str, Any]]:
        """The images an earlier run finished (``image`` -> record), with ``resume``; then
        the ledger is ready for this run's lines (a fresh one without ``resume``).

        Raises:
            UsageError: With ``resume``, for a folder that holds files but no ledger, or a
                ledger with other settings.
        """
        done = self._earlier() if resume else {}
        self._journal = output.Journal(self.path, keep=None if done else 0)
        self._head = [] if done else [line({"settings": self.settings})]
        return done

    def _earlier(self) -> dict[str, dict[str, Any]]:
        if not resumable(self.out, self.path.name, self.command):
            return {}
        done: dict[str, dict[str, Any]] = {}
        for record in journal_records(self.out, self.path, self.settings):
            key = self.key(record)
            if key is not None:
                done[key] = record
        return done

    def append(self, record: Mapping[str, Any]) -> None:
        """One image's record (the settings first, before the first one)."""
        assert self._journal is not None, "read() opens the ledger"
        for head in self._head:
            self._journal.append(head)
        self._head = []
        self._journal.append(line(record))

    def close(self) -> None:
        """Sync the ledger to disk and close it."""
        if self._journal is not None:
            self._journal.close()


def image_key(record: Mapping[str, Any]) -> str | None:
    """A record's image, for the record of an image done (None for a failed one)."""
    return str(record["image"]) if record.get("status") == "ok" and "image" in record else None


def resumable(out: Path, name: str, what: str) -> bool:
    """Whether ``out`` holds the journal ``name`` an earlier ``what`` (``cam-eval``) wrote.

    Raises:
        UsageError: For a folder that holds other files but not that journal.
    """
    if (out / name).is_file():
        return True
    if out.is_dir() and any(not p.name.startswith(output.TMP_MARK) for p in out.iterdir()):
        raise UsageError(
            f"{out} holds no {what} to resume (no {name}); use --overwrite to replace what is "
            "there, or another --out"
        )
    return False


def journal_records(out: Path, path: Path, settings: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The records of the journal at ``path`` after its first, the settings, which must be
    ``settings`` (none when there is no journal). A line cut short by a kill is left out,
    also once a later run has ended it with a line break (which makes it look whole).

    Raises:
        UsageError: For a journal written with other settings (in the output folder ``out``).
    """
    first = True
    for _, raw in output.Journal(path).lines():
        if not output.whole(raw):
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # cut short by a kill, then ended by the run that resumed
        if not isinstance(record, dict):
            continue
        if first:
            first = False
            check_settings(out, record.get("settings"), settings)
            continue
        yield record


def line(record: Mapping[str, Any]) -> bytes:
    """One JSON line of a ledger (compact; no NaN)."""
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
