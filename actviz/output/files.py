"""Writing files: the output folder and its guard, atomic writes, and removing what a command
wrote earlier.

Every file is written under a temporary name in its final folder and renamed into place, so an
interrupted run never leaves a half-written PNG or manifest that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any, BinaryIO

import numpy as np

from actviz.errors import OutputError

__all__ = [
    "TMP_MARK",
    "UNDECODED",
    "atomic_file",
    "atomic_path",
    "clear_outputs",
    "discard_files",
    "dumps_json",
    "opened",
    "prepare_out_dir",
    "remove_temporaries",
    "remove_written",
    "removed_if_empty",
    "temp_beside",
    "write_bytes",
    "write_error",
    "write_json",
    "write_state",
    "write_tensor",
]

TMP_MARK = ".actviz-tmp"
#: How text files hold a file name that is not UTF-8 on disk (a lone surrogate in Python): as
#: the escape ``\udcff``, which JSON reads back as the same string.
UNDECODED = "backslashreplace"


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
                "add --resume to finish an earlier run there, --overwrite to replace its "
                "outputs, or choose another --out"
            )
            raise OutputError(f"{out} is not empty; {advice}", usage=True)
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f"{TMP_MARK}-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(_os_message(out, exc)) from None
    return out


def remove_made(folder: Path) -> None:
    """Remove ``folder``, which this command created, with all it holds: what a command that
    then did nothing wrote there (its records, an empty report). Best effort: a file another
    process holds open stays."""
    shutil.rmtree(folder, ignore_errors=True)


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


def remove_written(
    out: Path, rels: Sequence[str], *, prune: Sequence[str] = (), trees: Sequence[str] = ()
) -> None:
    """Remove the files an earlier command wrote in ``out`` (paths relative to it), then the
    folders they leave empty, the empty folders under each of ``prune``, and the folders
    ``trees`` whole; never anything outside ``out``.

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
        for name in trees:
            top = (out / name).resolve()
            if root in top.parents and top.is_dir():
                shutil.rmtree(top)
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


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file open for writing under a temporary name beside ``path``; rename it
    into place when the block succeeds (for a writer that takes a file, such as numpy's).

    Raises:
        OutputError: If the folder cannot be created or the file cannot be written.
    """
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        yield fh


def write_tensor(path: Path, tensor: Any, fmt: str) -> None:
    """Write a raw activation atomically: ``npy`` (numpy) or ``safetensors`` (key
    ``activation``)."""
    with atomic_path(path) as tmp:
        if fmt == "npy":
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
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", errors=UNDECODED) as fh:
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


def discard_files(folder: Path, names: Iterable[str]) -> None:
    """Remove these files of ``folder`` if they are there, ignoring what cannot be removed:
    temporaries given up on, which a later run's clean-up removes again."""
    for name in names:
        with contextlib.suppress(OSError):
            (folder / name).unlink()


def remove_temporaries(folder: Path, names: Iterable[str], keep: Iterable[str] = ()) -> None:
    """Remove the temporaries of ``names`` in ``folder`` (what a run killed while writing them
    left, hidden), but those named in ``keep``."""
    kept = set(keep)
    for name in names:
        for leftover in folder.glob(f".{name}.*{TMP_MARK}"):
            if leftover.name not in kept:
                leftover.unlink(missing_ok=True)


def clear_outputs(
    out: Path,
    *,
    files: Sequence[str],
    temporaries: Sequence[str],
    trees: Sequence[str],
    folders: Iterable[PurePath],
) -> list[Path]:
    """Remove what earlier runs wrote in ``out``: its ``files``, the temporaries of
    ``temporaries`` (a killed run's, left for a resume), the
    folders ``trees`` whole, and the files directly in each of ``folders`` (then the folders
    they leave empty); never anything outside ``out``.

    Returns:
        The files left in place, for the caller to mention.

    Raises:
        OutputError: If something cannot be removed.
    """
    try:
        for name in files:
            (out / name).unlink(missing_ok=True)
        remove_temporaries(out, temporaries)
        for name in trees:
            shutil.rmtree(out / name, ignore_errors=True)
        root = out.resolve()
        for folder in folders:
            target = (out / folder).resolve()
            if root not in target.parents or not target.is_dir():
                continue  # never outside the output folder, whatever a record says
            for entry in target.iterdir():
                if entry.is_file() or entry.is_symlink():
                    entry.unlink()
            while target != root and not any(target.iterdir()):
                target.rmdir()
                target = target.parent
        return sorted(p for p in out.rglob("*") if not p.is_dir())
    except OSError as exc:
        raise OutputError(_os_message(out, exc)) from None
