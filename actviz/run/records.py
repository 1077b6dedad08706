"""The run's ledger: one line per finished image, on the output package's journal."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from actviz.command.resume import check_settings, settings_changed
from actviz.output import REPORT_DIR, UNDECODED, Journal, clear_outputs, whole, write_error

__all__ = ["RUN_FILES", "LedgerReader", "RunRecords"]

#: The files a run writes at the top of the output folder, besides the folder of report pages.
RUN_FILES = (
    ".actviz-records.jsonl",
    ".actviz-summary.json",
    "manifest.json",
    "stats.json",
    "stats.csv",
    "stats.parquet",
    "index.html",
    "gradient_flow.png",
)


class RunRecords:
    """The run's ledger: one line per finished image, appended after its PNGs are in place.

    ``--resume`` trusts an image only when its line is there, was written with the same
    settings, and every file it lists still exists; anything else is done again.

    The ledger is the run's per-image record on disk: nothing per image is kept in memory, a
    line is read back by its byte offset (:meth:`read`). Each line is a short head (the
    settings' digest, the image's path and folder, its status and files), a tab, and the
    image's full record, so a resume reads the heads of 20,000 lines in a fraction of a second
    (JSON escapes a tab inside strings, so the first raw tab ends the head). The first line of
    the file carries the settings as data, so a refused resume can name what changed. The
    record is packed (:func:`_packed`: each layer's keys written once a line), and read back
    whole.

    Lines of older versions (one JSON object, with the settings or their digest in it) are
    still read. A line cut short by an interruption is ignored.
    """

    FILE = RUN_FILES[0]

    def __init__(self, out: Path, settings: dict[str, Any]) -> None:
        self.path = out / self.FILE
        # As JSON gives them back: tuples become lists, other objects their str().
        self.settings: dict[str, Any] = json.loads(json.dumps(settings, default=str))
        self.digest = _digest(self.settings)
        # A new ledger starts with the settings as data.
        first = _line({"records": 3, "settings": self.settings}) + "\n"
        self.journal = Journal(self.path, first=first.encode("utf-8", UNDECODED))

    def completed(self) -> dict[tuple[str, str], int]:
        """Finished images of earlier runs: (input path, output folder) -> the byte offset of
        their line, for :meth:`read`.

        Raises:
            SettingsChanged: If the earlier run used other settings; the message names them.
        """
        done: dict[tuple[str, str], int] = {}
        earlier_settings: dict[str, Any] | None = None
        for offset, record, tab in self.heads():
            if "records" in record and isinstance(record.get("settings"), dict):
                earlier_settings = record["settings"]  # the file's first line
                continue
            earlier = record.get("settings")
            if isinstance(earlier, dict):  # an older line: the settings in every line
                check_settings(self.path.parent, earlier, self.settings)
            elif earlier != self.digest:
                if earlier_settings is not None and tab:
                    check_settings(self.path.parent, earlier_settings, self.settings)
                text = record.get("settings_text")
                self._refuse(f"other settings ({text})" if text else "other settings")
            files = record["files"] if tab else _record_files(record)
            if record.get("status") == "ok" and all(
                (self.path.parent / f).is_file() for f in files
            ):
                done[(record["path"], record["out_dir"])] = offset
        return done

    def read(self, offset: int) -> dict[str, Any]:
        """The full record of the line at ``offset`` (as :meth:`completed` and :meth:`add`
        give it)."""
        with self.reader() as reader:
            return reader.read(offset)

    def reader(self) -> LedgerReader:
        """A reader of many records by offset, over one open file."""
        return LedgerReader(self.path)

    def add(self, record: dict[str, Any]) -> int:
        """Append one image's record as one line of the journal: handed to the OS at once (a
        killed run loses nothing it recorded), synced to disk now and then and at
        :meth:`close` (what a power cut leaves torn is done again by ``--resume``).

        Returns:
            The byte offset of its line, for :meth:`read`.
        """
        head = {
            "settings": self.digest,
            "path": record.get("path"),
            "out_dir": record.get("out_dir"),
            "status": record.get("status"),
            "files": _record_files(record),
        }
        line = _line(head) + "\t" + _line(_packed(record)) + "\n"
        return self.journal.append(line.encode("utf-8", UNDECODED))

    def sync(self) -> int:
        """Sync what was recorded to disk.

        Returns:
            The ledger's length in bytes: every line below it is complete and on disk.
        """
        return self.journal.sync()

    def close(self) -> None:
        """Sync what was recorded to disk and close the ledger (it reopens when added to)."""
        self.journal.close()

    def heads(self) -> Iterator[tuple[int, dict[str, Any], bool]]:
        """``(offset, head, new)`` of every whole line: its head (``new``: a head, a tab and
        the full record), or the whole record of an older line; a line cut short by an
        interruption, and anything not a JSON object, is left out."""
        for offset, line in self.lines():
            if not whole(line):
                continue  # the last line, cut short by an interruption
            head, tab, _ = line.partition(b"\t")
            try:
                record = json.loads(head if tab else line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(record, dict):
                yield offset, record, bool(tab)

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of every line, read in large blocks."""
        return self.journal.lines()

    def reset(self, folders: Sequence[PurePosixPath]) -> list[Path]:
        """Remove everything earlier runs wrote here, so the folder holds this run's outputs
        only: the run's files, the report, and every image folder an earlier record or manifest
        names (an earlier run over other inputs included), besides ``folders``.

        Returns:
            The files left in place because no run wrote them, for the caller to mention.
        """
        out = self.path.parent
        try:
            earlier = self._earlier_folders()
        except OSError as exc:
            raise write_error(out, exc) from None
        return clear_outputs(
            out,
            files=RUN_FILES,
            # The parts of a table a killed run left for the next resume, and the temporary
            # of a checkpoint it was writing.
            temporaries=("stats.parquet", "stats.csv", ".actviz-summary.json"),
            trees=(REPORT_DIR,),
            folders={*earlier, *folders},
        )

    def _earlier_folders(self) -> set[PurePosixPath]:
        """Image folders named by the records and the manifest already here."""
        records: list[Any] = [record for _, record, _ in self.heads()]
        manifest_path = self.path.parent / "manifest.json"
        if manifest_path.exists():
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                images = json.loads(manifest_path.read_text(encoding="utf-8")).get("images")
                records += images if isinstance(images, list) else []  # older manifests
        return {
            PurePosixPath(record["out_dir"])
            for record in records
            if isinstance(record, dict) and isinstance(record.get("out_dir"), str)
        }

    def _refuse(self, what: str) -> NoReturn:
        raise settings_changed(self.path.parent, what)


class LedgerReader:
    """Reads ledger records by byte offset (:meth:`RunRecords.add` gives them), opening the
    file once, on the first read; a context manager that closes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None

    def read(self, offset: int) -> dict[str, Any]:
        """The full record of the line at ``offset``."""
        try:
            if self._fh is None:
                self._fh = self.path.open("rb")
            self._fh.seek(offset)
            line: bytes = self._fh.readline()
        except OSError as exc:
            raise write_error(self.path, exc) from None
        return _record_of(line)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> LedgerReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str, separators=_COMPACT)


_COMPACT = (",", ":")
#: The names of a packed record's layer fields and statistics, in order (written once a line).
_LAYER_FIELDS = "layer_fields"
_STAT_FIELDS = "stat_fields"


def _packed(record: dict[str, Any]) -> dict[str, Any]:
    """The record as its line holds it: what every layer repeats written once.

    Each layer is the list of its values in the order of ``layer_fields`` (the first layer's
    keys), its statistics the list of theirs in the order of ``stat_fields``, and a grid's
    channels that are ``0 .. n-1`` the number ``n``; a layer or statistics with other keys stay
    as they are. :func:`_unpacked` gives back the same record, keys in the same order.
    """
    layers = record.get("layers")
    if not layers or not all(isinstance(x, dict) for x in layers):
        return record
    fields = list(layers[0])
    stats = next((x["stats"] for x in layers if isinstance(x.get("stats"), dict)), None)
    stat_fields = list(stats) if stats else []
    packed = []
    for layer in layers:
        if list(layer) != fields:
            packed.append(layer)
            continue
        values = dict(layer)
        channels, stat = values.get("channels"), values.get("stats")
        if isinstance(channels, list) and channels and channels == list(range(len(channels))):
            values["channels"] = len(channels)
        if isinstance(stat, dict) and list(stat) == stat_fields:
            values["stats"] = list(stat.values())
        packed.append(list(values.values()))
    return {**record, _LAYER_FIELDS: fields, _STAT_FIELDS: stat_fields, "layers": packed}


def _unpacked(record: dict[str, Any]) -> dict[str, Any]:
    """The record :func:`_packed` packed (any other record as it is)."""
    fields = record.pop(_LAYER_FIELDS, None)
    stat_fields = record.pop(_STAT_FIELDS, None)
    if fields is None:
        return record
    layers = []
    for layer in record.get("layers") or []:
        if isinstance(layer, dict):
            layers.append(layer)
            continue
        values = dict(zip(fields, layer, strict=True))
        if isinstance(values.get("channels"), int):
            values["channels"] = list(range(values["channels"]))
        if isinstance(values.get("stats"), list):
            values["stats"] = dict(zip(stat_fields, values["stats"], strict=True))
        layers.append(values)
    record["layers"] = layers
    return record


def _record_files(record: dict[str, Any]) -> list[str]:
    """The files an image's record lists as its grids: what resume checks are still there."""
    return [x["file"] for x in record.get("layers") or [] if x.get("file")]


def _record_of(line: bytes) -> dict[str, Any]:
    """The full record of one ledger line (either format)."""
    _, tab, body = line.partition(b"\t")
    record: dict[str, Any] = json.loads(body if tab else line)
    record.pop("settings", None)
    record.pop("settings_text", None)
    return _unpacked(record)


def _digest(settings: dict[str, Any]) -> str:
    # The same text (and so the same digest) as older versions wrote for the same settings.
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
