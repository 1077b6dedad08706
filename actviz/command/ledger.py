"""The resume ledger of a command that scores or draws images one by one (``cam-eval``,
``attribute``): a journal whose first line is the settings, then one JSON line per image done.

With ``--resume`` the images an earlier run with the same settings finished are read back and
skipped; other settings, or a folder that holds files but no such ledger, are refused (going
on there would mix two runs' files). A line cut short by a kill is left out, also once a later
run has ended it with a line break (which makes it look whole). The settings go first with the
first record, so a command that fails before any image leaves no ledger behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actviz import output
from actviz.command.resume import check_settings
from actviz.errors import UsageError

__all__ = ["ImageLedger"]


class ImageLedger:
    """One command's ledger in its output folder.

    Args:
        out: The output folder.
        name: The ledger's file name (``cam-eval.jsonl``).
        command: The command, for messages (``cam-eval``).
        settings: What a resumed run must share with the earlier one (JSON-ready).
    """

    def __init__(
        self,
        out: Path,
        name: str,
        *,
        command: str,
        settings: Mapping[str, Any],
    ) -> None:
        self.path = out / name
        self.out = out
        self.command = command
        self.settings = dict(settings)
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
        if not self.path.is_file():
            if any(not p.name.startswith(output.TMP_MARK) for p in self.out.iterdir()):
                raise UsageError(
                    f"{self.out} holds no {self.command} to resume (no {self.path.name}); use "
                    "--overwrite to replace what is there, or another --out"
                )
            return {}
        records: list[dict[str, Any]] = []
        with self.path.open("rb") as fh:
            for raw in fh:
                if not output.whole(raw):
                    continue
                try:
                    data = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # cut short by a kill, then ended by the run that resumed
                if isinstance(data, dict):
                    records.append(data)
        if not records:
            return {}
        check_settings(self.out, records[0].get("settings"), self.settings)
        return {str(r["image"]): r for r in records[1:] if r.get("status") == "ok" and "image" in r}

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


def line(record: Mapping[str, Any]) -> bytes:
    """One JSON line of a ledger (compact; no NaN)."""
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
