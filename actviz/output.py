"""The output folder: safe names, layout, and atomic writes. The one module that writes files.

Every file is written under a temporary name in its final folder and renamed into place, so an
interrupted run never leaves a half-written PNG or manifest that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import shutil
import time
import unicodedata
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from actviz.errors import OutputError

__all__ = [
    "TMP_MARK",
    "atomic_path",
    "image_dirs",
    "layer_filename",
    "RunRecords",
    "prepare_out_dir",
    "opened",
    "remove_written",
    "removed_if_empty",
    "safe_name",
    "dumps_json",
    "temp_beside",
    "write_error",
    "write_bytes",
    "write_json",
    "write_state",
    "write_tensor",
]

TMP_MARK = ".actviz-tmp"
#: The files a run writes at the top of the output folder, and the folder of report pages.
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
REPORT_DIR = "report"
#: Top-level folders that belong to one command each (the run's report pages, the pictures
#: of diff, top-images and optimize): never an image's folder, so that commands sharing an
#: output folder never write or remove each other's files.
COMMAND_DIRS = (REPORT_DIR, "diff", "top-images", "optimize")
_MAX_NAME = 120
# Windows device names, with or without an extension; COM/LPT take superscript digits too.
_RESERVED = frozenset(
    {"con", "prn", "aux", "nul"}
    | {f"{dev}{i}" for dev in ("com", "lpt") for i in (*"123456789", "¹", "²", "³")}
)
# Combining marks (spacing or not) belong to the letter before them: Devanagari or Thai words
# are mostly made of them, and NFC cannot fold them all into precomposed letters.
_MARKS = frozenset({"Mn", "Mc"})


def safe_name(text: str, *, max_len: int = _MAX_NAME) -> str:
    """A file-name-safe version of a layer or image name.

    Keeps letters and digits of any script (NFC-normalized, so a name typed on macOS and on
    Linux gives the same folder), ``.``, ``-`` and ``_``, and turns every other run of
    characters (path separators, spaces, punctuation, control and format characters) into
    ``_``. Never returns ``.``/``..`` or a hidden name, avoids Windows device names, and
    shortens names longer than ``max_len`` UTF-8 bytes with a hash so distinct names stay
    distinct: bytes, because that is what file systems count (255 at most).

    Example:
        >>> safe_name("layer1.0.relu:2")
        'layer1.0.relu_2'
        >>> safe_name("ünï cödé")
        'ünï_cödé'
    """
    runs = itertools.groupby(unicodedata.normalize("NFC", text), key=_keep)
    name = "".join("".join(run) if keep else "_" for keep, run in runs).strip("_") or "_"
    if name.startswith("."):
        name = "_" + name.lstrip(".")
    if name.split(".")[0].lower() in _RESERVED:
        name = "_" + name
    if len(name.encode("utf-8")) > max_len:
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        head = name.encode("utf-8")[: max_len - 9].decode("utf-8", "ignore")  # whole characters
        name = f"{head}-{digest}"
    return name


def _keep(char: str) -> bool:
    """A letter or digit of any script, a combining mark, or one of ``._-``."""
    return char in "._-" or char.isalnum() or unicodedata.category(char) in _MARKS


def layer_filename(index: int, key: str, *, width: int = 2) -> str:
    """``NN_<safe layer name>.png``; NN is the capture order, zero-padded to ``width``."""
    return f"{index:0{width}d}_{safe_name(key)}.png"


def image_dirs(rels: Sequence[PurePosixPath]) -> list[PurePosixPath]:
    """One output folder per input image: its relative path without extension, made safe.

    Folders stay distinct even on case-insensitive file systems (compared with full Unicode
    case folding: ``Straße`` and ``STRASSE``, ``ΟΔΟΣ`` and ``οδος`` are one folder there): a
    later image whose folder would collide with an earlier one gets its extension, then a
    counter, appended. The folders of :data:`COMMAND_DIRS` are never used: an image
    ``diff.jpg`` gets ``diff_jpg/``, a subfolder ``report/`` of the input becomes ``report_/``.
    """
    reserved = {_folded(PurePosixPath(name)) for name in COMMAND_DIRS}
    taken: set[str] = set(reserved)
    result: list[PurePosixPath] = []
    for rel in rels:
        parts = [safe_name(p) for p in rel.parent.parts if p not in ("", ".", "/")]
        if parts and _folded(PurePosixPath(parts[0])) in reserved:
            parts[0] += "_"
        stem = safe_name(rel.stem or rel.name)
        candidates = [stem, safe_name(f"{stem}_{rel.suffix.lstrip('.')}")]
        chosen = None
        for candidate in candidates:
            path = PurePosixPath(*parts, candidate)
            if _folded(path) not in taken:
                chosen = path
                break
        counter = 2
        while chosen is None:
            path = PurePosixPath(*parts, f"{stem}-{counter}")
            if _folded(path) not in taken:
                chosen = path
            counter += 1
        taken.add(_folded(chosen))
        result.append(chosen)
    return result


def _folded(path: PurePosixPath) -> str:
    """The key under which a case-insensitive file system would find ``path``."""
    return unicodedata.normalize("NFC", str(path).casefold())


def prepare_out_dir(
    out: Path, *, resume: bool = False, overwrite: bool = False, hint: str | None = None
) -> Path:
    """Create the output folder and prove it is writable, before any work is done.

    A folder that already holds files is refused unless the run resumes or overwrites, so an
    earlier run's pictures are never mixed with this one's by accident; ``hint`` replaces the
    refusal's advice (for a command that cannot resume).

    Raises:
        OutputError: If it is a file, is not empty (without resume/overwrite), or cannot be
            created or written.
    """
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose another --out")
    try:
        if not (resume or overwrite) and out.is_dir() and any(out.iterdir()):
            advice = hint or (
                "add --resume to finish an earlier run there, "
                "--overwrite to replace its outputs, or choose another --out"
            )
            raise OutputError(f"{out} is not empty; {advice}", usage=True)
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f"{TMP_MARK}-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(_os_message(out, exc)) from None
    return out


class RunRecords:
    """The run's ledger: one line per finished image, appended after its PNGs are in place.

    ``--resume`` trusts an image only when its line is there, was written with the same
    settings, and every file it lists still exists; anything else is done again.

    The ledger is the run's per-image record on disk: nothing per image is kept in memory, a
    line is read back by its byte offset (:meth:`read`). Each line is a short head (the
    settings' digest, the image's path and folder, its status and files), a tab, and the
    image's full record, so a resume reads the heads of 20,000 lines in a fraction of a second
    (JSON escapes a tab inside strings, so the first raw tab ends the head). The first line of
    the file carries the settings as data, so a refused resume can name what changed.

    Lines of older versions (one JSON object, with the settings or their digest in it) are
    still read. A line cut short by an interruption is ignored.
    """

    FILE = ".actviz-records.jsonl"
    SYNC_SECONDS = 2.0

    def __init__(self, out: Path, settings: dict[str, Any]) -> None:
        self.path = out / self.FILE
        # As JSON gives them back: tuples become lists, other objects their str().
        self.settings: dict[str, Any] = json.loads(json.dumps(settings, default=str))
        self.digest = _digest(self.settings)
        self._handle: Any = None
        self._size = 0  # the ledger's length while it is open for appending
        self._synced = time.monotonic()

    def completed(self) -> dict[tuple[str, str], int]:
        """Finished images of earlier runs: (input path, output folder) -> the byte offset of
        their line, for :meth:`read`.

        Raises:
            OutputError: If the earlier run used other settings; the message names them.
        """
        done: dict[tuple[str, str], int] = {}
        earlier_settings: dict[str, Any] | None = None
        for offset, record, tab in self.heads():
            if "records" in record and isinstance(record.get("settings"), dict):
                earlier_settings = record["settings"]  # the file's first line
                continue
            earlier = record.get("settings")
            if isinstance(earlier, dict):  # an older line: the settings in every line
                if _digest(earlier) != self.digest:
                    self._refuse(_differences(earlier, self.settings))
            elif earlier != self.digest:
                if earlier_settings is not None and tab:
                    self._refuse(_differences(earlier_settings, self.settings))
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
        """Append one image's record as one write, handed to the OS at once (a killed run
        loses nothing it recorded) and synced to disk at most every :attr:`SYNC_SECONDS`
        and at :meth:`close` (a sync per image would cost more than a tiny image's work;
        what a power cut leaves torn is done again by ``--resume``).

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
        line = _line(head) + "\t" + _line(record) + "\n"
        try:
            fh = self._handle or self._open()
            offset = self._size
            data = line.encode("utf-8", _UNDECODED)
            fh.write(data)
            fh.flush()
            # Counted, not asked: tell() on a file opened for appending costs a system call
            # and, with a read buffer, a millisecond an image.
            self._size += len(data)
            if time.monotonic() - self._synced > self.SYNC_SECONDS:
                os.fsync(fh.fileno())
                self._synced = time.monotonic()
        except OSError as exc:
            raise OutputError(_os_message(self.path, exc)) from None
        return offset

    def sync(self) -> int:
        """Sync what was recorded to disk.

        Returns:
            The ledger's length in bytes: every line below it is complete and on disk.
        """
        fh = self._handle
        if fh is None:
            return self.path.stat().st_size if self.path.exists() else 0
        try:
            fh.flush()
            os.fsync(fh.fileno())
            self._synced = time.monotonic()
        except OSError as exc:
            raise OutputError(_os_message(self.path, exc)) from None
        return self._size

    def close(self) -> None:
        """Sync what was recorded to disk and close the ledger (it reopens when added to)."""
        if self._handle is None:
            return
        fh, self._handle = self._handle, None
        try:
            fh.flush()
            os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(_os_message(self.path, exc)) from None
        finally:
            fh.close()

    def _open(self) -> Any:
        start = b""
        if not self.path.exists() or self.path.stat().st_size == 0:
            # A new ledger starts with the settings as data.
            start = (_line({"records": 2, "settings": self.settings}) + "\n").encode(
                "utf-8", _UNDECODED
            )
        else:
            with self.path.open("rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":  # a line cut short: the next one starts afresh
                    start = b"\n"
        fh = self.path.open("ab")
        try:
            fh.write(start)
            fh.flush()
            self._size = fh.seek(0, os.SEEK_END)
        except BaseException:
            fh.close()
            raise
        self._handle = fh
        return fh

    def heads(self) -> Iterator[tuple[int, dict[str, Any], bool]]:
        """``(offset, head, new)`` of every whole line: its head (``new``: a head, a tab and
        the full record), or the whole record of an older line; a line cut short by an
        interruption, and anything not a JSON object, is left out."""
        for offset, line in self.lines():
            if not line.endswith(b"\n"):
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
        if not self.path.exists():
            return
        offset = 0
        try:
            with self.path.open("rb", buffering=1 << 20) as fh:
                for line in fh:
                    yield offset, line
                    offset += len(line)
        except OSError as exc:
            raise OutputError(_os_message(self.path, exc)) from None

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
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
            # The parts of a table a killed run left for the next resume, and the temporary
            # of a checkpoint it was writing.
            for name in ("stats.parquet", "stats.csv", ".actviz-summary.json"):
                for leftover in out.glob(f".{name}.*{TMP_MARK}"):
                    leftover.unlink()
            shutil.rmtree(out / REPORT_DIR, ignore_errors=True)
            for folder in {*earlier, *folders}:
                target = (out / folder).resolve()
                if out.resolve() not in target.parents or not target.is_dir():
                    continue  # never outside the output folder, whatever a record says
                for entry in target.iterdir():
                    if entry.is_file() or entry.is_symlink():
                        entry.unlink()
                while target != out.resolve() and not any(target.iterdir()):
                    target.rmdir()
                    target = target.parent
            return sorted(p for p in out.rglob("*") if not p.is_dir())
        except OSError as exc:
            raise OutputError(_os_message(out, exc)) from None

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
        raise OutputError(
            f"--resume: {self.path.parent} was written with {what}; "
            "use --overwrite or another --out",
            usage=True,
        )


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
            raise OutputError(_os_message(self.path, exc)) from None
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
    return json.dumps(data, ensure_ascii=False, default=str)


def _record_files(record: dict[str, Any]) -> list[str]:
    """The files an image's record lists as its grids: what resume checks are still there."""
    return [x["file"] for x in record.get("layers") or [] if x.get("file")]


def _record_of(line: bytes) -> dict[str, Any]:
    """The full record of one ledger line (either format)."""
    _, tab, body = line.partition(b"\t")
    record: dict[str, Any] = json.loads(body if tab else line)
    record.pop("settings", None)
    record.pop("settings_text", None)
    return record


def _digest(settings: dict[str, Any]) -> str:
    # The same text (and so the same digest) as older versions wrote for the same settings.
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _differences(earlier: dict[str, Any], now: dict[str, Any]) -> str:
    """``selector=layer4.* (now conv) and draw.max_channels=64 (now 16)``: only what differs,
    nested settings by their dotted path, in the order of the current settings."""
    old, new = _flatten(earlier), _flatten(now)
    parts = []
    for key in [*new, *(k for k in old if k not in new)]:
        if key not in old:
            parts.append(f"{key} not set (now {_value(new[key])})")
        elif key not in new:
            parts.append(f"{key}={_value(old[key])} (now not set)")
        elif _digest({"": old[key]}) != _digest({"": new[key]}):  # NaN-proof comparison
            parts.append(f"{key}={_value(old[key])} (now {_value(new[key])})")
    if not parts:
        return "other settings"
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _value(value: Any) -> str:
    return value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False)


@contextlib.contextmanager
def opened(
    out: Path, *, resume: bool = False, overwrite: bool = False, hint: str | None = None
) -> Iterator[Path]:
    """A command's output folder for the block: prepared (:func:`prepare_out_dir`), and
    removed again when the block fails, if the command created it and it is still empty."""
    created = not out.exists()
    prepare_out_dir(out, resume=resume, overwrite=overwrite, hint=hint)
    with removed_if_empty(out, created):
        yield out


def remove_written(out: Path, rels: Sequence[str], *, prune: Sequence[str] = ()) -> None:
    """Remove the files an earlier command wrote in ``out`` (paths relative to it), then the
    folders they leave empty, and the empty folders under each of ``prune``; never anything
    outside ``out``.

    Raises:
        OutputError: If a file or folder cannot be removed.
    """
    root = out.resolve()
    try:
        for rel in rels:
            target = (out / rel).resolve()
            if root not in target.parents or not target.is_file():
                continue  # never outside the folder
            target.unlink()
            folder = target.parent
            while folder != root and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
        for name in prune:
            top = (out / name).resolve()
            if root not in top.parents or not top.is_dir():
                continue
            for path in sorted(top.rglob("*"), reverse=True):
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            if not any(top.iterdir()):
                top.rmdir()
    except OSError as exc:
        raise OutputError(f"cannot remove the earlier outputs in {out}: {exc}") from None


@contextlib.contextmanager
def removed_if_empty(folder: Path, created: bool) -> Iterator[None]:
    """Remove ``folder`` when the block fails, if this run created it and it is still empty."""
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):  # not empty, or already gone: leave it
                folder.rmdir()
        raise


def temp_beside(path: Path) -> Path:
    """A fresh temporary name in ``path``'s folder, to write under and then rename to ``path``:
    hidden, and marked with :data:`TMP_MARK` so that a leftover is recognised as one."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{TMP_MARK}")


def write_error(path: Path, exc: OSError) -> OutputError:
    """The :class:`OutputError` for an OS error while writing ``path``, naming the fix."""
    return OutputError(_os_message(path, exc))


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place when the block succeeds.

    Raises:
        OutputError: If the folder cannot be created or the file cannot be written.
    """
    tmp = temp_beside(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(_os_message(path, exc)) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_tensor(path: Path, tensor: Any, fmt: str) -> None:
    """Write a raw activation atomically: ``npy`` (numpy) or ``safetensors`` (key
    ``activation``)."""
    with atomic_path(path) as tmp:
        if fmt == "npy":
            import numpy as np

            with tmp.open("wb") as fh:
                np.save(fh, tensor.numpy())
        else:
            from safetensors.torch import save_file

            save_file({"activation": tensor.contiguous()}, str(tmp))


def write_bytes(path: Path, data: bytes) -> None:
    """Write bytes (a report page, a chart, a CSV) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically, flushed to disk: the manifest is the record of the run."""
    text = dumps_json(data)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", errors=_UNDECODED) as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_state(path: Path, data: Any) -> None:
    """Write a run's state as compact ASCII JSON atomically, flushed to disk: non-finite
    floats as Python's json writes them (``NaN``, ``Infinity``), which it reads back."""
    text = json.dumps(data, separators=(",", ":"))
    with atomic_path(path) as tmp, tmp.open("w", encoding="ascii") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


#: How JSON text holds a file name that is not UTF-8 on disk (a lone surrogate in Python):
#: as the JSON escape ``\udcff``, which reads back as the same string.
_UNDECODED = "backslashreplace"

_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)


def dumps_json(data: Any, *, levels: int = 4) -> str:
    """JSON indented by two spaces for the outer ``levels`` of nesting, one line per value below.

    A manifest lists every layer of every image: fully indented, its per-channel lists put
    each number on a line of its own (13 MB for 120 images) and force the json module's
    Python encoder; below ``levels`` its C encoder writes one line per layer, 5x faster and a
    third of the size, still read line by line.
    """

    def walk(value: Any, depth: int) -> str:
        if depth >= levels or not isinstance(value, dict | list | tuple) or not value:
            return _ENCODE.encode(value)
        if not isinstance(value, dict) and not any(
            isinstance(v, dict | list | tuple) for v in value
        ):
            return _ENCODE.encode(value)  # a list of numbers or names: one line
        pad, inner = "  " * depth, "  " * (depth + 1)
        if isinstance(value, dict):
            items = [f"{inner}{_key(k)}: {walk(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        items = [f"{inner}{walk(v, depth + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"

    return walk(data, 0)


def _key(key: Any) -> str:
    """A dict key as the json module writes it (``True`` as ``"true"``; a tuple is an error)."""
    if isinstance(key, str):
        return _ENCODE.encode(key)
    return _ENCODE.encode({key: 0})[1:-4]


def _os_message(path: Path, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        fix = "free some space or choose another --out"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "choose a writable --out"
    else:
        fix = "choose another --out"
    return f"cannot write {path}: {reason}; {fix}"
