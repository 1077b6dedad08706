"""The output folder: safe names, layout, and atomic writes. The one module that writes files.

Every file is written under a temporary name in its final folder and renamed into place, so an
interrupted run never leaves a half-written PNG or manifest that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.errors import OutputError

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "TMP_MARK",
    "atomic_path",
    "image_dirs",
    "layer_filename",
    "RunRecords",
    "prepare_out_dir",
    "safe_name",
    "write_bytes",
    "write_json",
    "write_png",
    "write_tensor",
]

TMP_MARK = ".actviz-tmp"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 120
_RESERVED = frozenset(
    {"con", "prn", "aux", "nul"}
    | {f"com{i}" for i in range(1, 10)}
    | {f"lpt{i}" for i in range(1, 10)}
)


def safe_name(text: str, *, max_len: int = _MAX_NAME) -> str:
    """A file-name-safe version of a layer or image name.

    Keeps ``[A-Za-z0-9._-]``, turns every other run of characters into ``_``, never returns
    ``.``/``..`` or a hidden name, avoids Windows device names, and shortens long names with
    a hash so distinct names stay distinct.

    Example:
        >>> safe_name("layer1.0.relu:2")
        'layer1.0.relu_2'
    """
    name = _UNSAFE.sub("_", text).strip("_") or "_"
    if name.startswith("."):
        name = "_" + name.lstrip(".")
    if name.split(".")[0].lower() in _RESERVED:
        name = "_" + name
    if len(name) > max_len:
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[: max_len - 9]}-{digest}"
    return name


def layer_filename(index: int, key: str, *, width: int = 2) -> str:
    """``NN_<safe layer name>.png``; NN is the capture order, zero-padded to ``width``."""
    return f"{index:0{width}d}_{safe_name(key)}.png"


def image_dirs(rels: Sequence[PurePosixPath]) -> list[PurePosixPath]:
    """One output folder per input image: its relative path without extension, made safe.

    Folders stay distinct even on case-insensitive file systems: a later image whose folder
    would collide with an earlier one gets its extension, then a counter, appended.
    """
    taken: set[str] = set()
    result: list[PurePosixPath] = []
    for rel in rels:
        parts = [safe_name(p) for p in rel.parent.parts if p not in ("", ".", "/")]
        stem = safe_name(rel.stem or rel.name)
        candidates = [stem, safe_name(f"{stem}_{rel.suffix.lstrip('.')}")]
        chosen = None
        for candidate in candidates:
            path = PurePosixPath(*parts, candidate)
            if str(path).lower() not in taken:
                chosen = path
                break
        counter = 2
        while chosen is None:
            path = PurePosixPath(*parts, f"{stem}-{counter}")
            if str(path).lower() not in taken:
                chosen = path
            counter += 1
        taken.add(str(chosen).lower())
        result.append(chosen)
    return result


def prepare_out_dir(out: Path, *, resume: bool = False, overwrite: bool = False) -> Path:
    """Create the output folder and prove it is writable, before any work is done.

    A folder that already holds files is refused unless the run resumes or overwrites, so an
    earlier run's pictures are never mixed with this one's by accident.

    Raises:
        OutputError: If it is a file, is not empty (without resume/overwrite), or cannot be
            created or written.
    """
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose another --out")
    try:
        if not (resume or overwrite) and out.is_dir() and any(out.iterdir()):
            raise OutputError(
                f"{out} is not empty; add --resume to finish an earlier run there, "
                "--overwrite to replace its outputs, or choose another --out",
                usage=True,
            )
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f"{TMP_MARK}-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(_os_message(out, exc)) from None
    return out


class RunRecords:
    """One JSON line per finished image, appended after its PNGs are in place.

    ``--resume`` trusts an image only when its line is there, was written with the same
    settings, and every file it lists still exists; anything else is done again.
    """

    FILE = ".actviz-records.jsonl"

    def __init__(self, out: Path, settings: dict[str, Any]) -> None:
        self.path = out / self.FILE
        self.settings = settings
        self.digest = hashlib.sha256(
            json.dumps(settings, sort_keys=True, default=str).encode()
        ).hexdigest()[:16]

    def completed(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Finished images of earlier runs, keyed by (input path, output folder).

        Raises:
            OutputError: If the earlier run used other settings.
        """
        done: dict[tuple[str, str], dict[str, Any]] = {}
        if not self.path.exists():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by an interruption
                continue
            if record.get("settings") != self.digest:
                earlier = record.get("settings_text", "other settings")
                raise OutputError(
                    f"--resume: {self.path.parent} was written with {earlier}, not "
                    f"{_describe(self.settings)}; use --overwrite or another --out",
                    usage=True,
                )
            files = [x["file"] for x in record.get("layers", []) if x.get("file")]
            if record.get("status") == "ok" and all(
                (self.path.parent / f).is_file() for f in files
            ):
                done[(record["path"], record["out_dir"])] = record
        return done

    def add(self, record: dict[str, Any]) -> None:
        """Append one image's record; a single short write, flushed to disk."""
        line = json.dumps(
            {"settings": self.digest, "settings_text": _describe(self.settings), **record},
            ensure_ascii=False,
            default=str,
        )
        try:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(_os_message(self.path, exc)) from None

    def reset(self, folders: Sequence[PurePosixPath]) -> None:
        """Forget earlier records and remove the earlier grids of the given image folders."""
        out = self.path.parent
        try:
            for name in (self.FILE, "manifest.json"):
                (out / name).unlink(missing_ok=True)
            for folder in folders:
                target = out / folder
                if target.is_dir():
                    for png in target.glob("[0-9]*_*.png"):
                        png.unlink()
        except OSError as exc:
            raise OutputError(_os_message(out, exc)) from None


def _describe(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place when the block succeeds.

    Raises:
        OutputError: If the folder cannot be created or the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{TMP_MARK}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(_os_message(path, exc)) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_png(path: Path, image: Image.Image, *, compress_level: int = 1) -> None:
    """Write a PNG atomically. Level 1 is the fast end of zlib: about 4x faster than the
    default 6 for a few percent more bytes."""
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=compress_level)


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
    """Write pretty JSON atomically, flushed to disk: the manifest is the record of the run."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=str)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _os_message(path: Path, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        fix = "free some space or choose another --out"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "choose a writable --out"
    else:
        fix = "choose another --out"
    return f"cannot write {path}: {reason}; {fix}"
