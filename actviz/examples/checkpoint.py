"""The resume files: the accumulator, and a ledger of the images it covers.

``OUT/.actviz-top-images.npz`` holds every layer's :class:`~actviz.examples.topk.LayerTop`
arrays and a JSON record of the settings and exact sums. It is an ``npz`` read with
``allow_pickle=False``: a file in an output folder is never a way to run code. Its size
depends on layers x channels x k, never on the number of images: the images already merged
are in ``OUT/.actviz-top-images.done``, one JSON line (a list of paths) per merged batch,
appended as the run goes. The state records how many bytes of that ledger it covers and is
written (temporary name, then renamed) only after those bytes are on disk, so the state and
its done images always belong together, whenever the run is stopped: lines past that length
(a batch merged after the last save, a line cut short) are dropped on resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from actviz.errors import OutputError
from actviz.examples.topk import ARRAY_FIELDS, LayerTop, TopK

__all__ = [
    "FILE",
    "LEDGER",
    "Checkpoint",
    "Ledger",
    "load_checkpoint",
    "remove_checkpoint",
    "save_checkpoint",
]

FILE = ".actviz-top-images.npz"
LEDGER = ".actviz-top-images.done"
_FORMAT = 2


@dataclass(frozen=True)
class Checkpoint:
    """What an earlier run of the same settings had done.

    Attributes:
        top: Its accumulator.
        images: How many images it covers.
        ledger_bytes: The length of the ledger that lists them.
        done: Format 1 states (older versions) list their images here instead of a ledger.
    """

    top: TopK
    images: int
    ledger_bytes: int
    done: tuple[str, ...] | None = None

    def paths(self, out: Path) -> Iterator[str]:
        """The images it covers, read from the ledger as a stream.

        Raises:
            OutputError: If the ledger is shorter than the state says (damaged or removed).
        """
        if self.done is not None:
            yield from self.done
            return
        path = out / LEDGER
        try:
            size = path.stat().st_size if self.ledger_bytes else 0
        except OSError:
            size = -1
        if size < self.ledger_bytes:
            raise OutputError(
                f"cannot resume from {out / FILE}: {path} is missing or shorter than the state "
                "it belongs to; use --overwrite to start again"
            )
        if not self.ledger_bytes:
            return
        with path.open("rb") as fh:
            left = self.ledger_bytes
            for raw in fh:
                line, left = raw[:left], left - len(raw)
                with contextlib.suppress(ValueError):  # a line cut short: never covered
                    paths = json.loads(line)
                    if isinstance(paths, list):
                        yield from (str(p) for p in paths)
                if left <= 0:
                    return


class Ledger:
    """The append-only list of merged images (one JSON line per batch), kept open for the run.

    Opened at the length the loaded state covers, so lines it never saw are dropped.
    """

    def __init__(self, out: Path, keep: Checkpoint | None) -> None:
        self.path = out / LEDGER
        self._fh: IO[bytes] | None = None
        self._keep = keep
        self.size = 0 if keep is None or keep.done is not None else keep.ledger_bytes

    def append(self, paths: list[str]) -> int:
        """Append one batch's paths; the ledger's length after them."""
        fh = self._file()
        # ASCII with escapes: any path, undecodable names included, reads back the same.
        line = json.dumps(paths).encode("ascii") + b"\n"
        try:
            fh.write(line)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc}") from None
        self.size += len(line)
        return self.size

    def flush(self) -> None:
        """Everything appended so far on disk, before a state that covers it is written."""
        if self._fh is None:
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc}") from None

    def close(self) -> None:
        """Close the file (flushing it)."""
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None

    def _file(self) -> IO[bytes]:
        if self._fh is not None:
            return self._fh
        keep = self._keep
        try:
            fh = self.path.open("r+b" if self.path.exists() else "w+b")
            fh.truncate(self.size)  # lines no saved state covers are dropped
            fh.seek(self.size)
            if keep is not None and keep.done:  # a format 1 state: its list moves here
                fh.write(json.dumps(list(keep.done)).encode("ascii") + b"\n")
                self.size = fh.tell()
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc}") from None
        self._fh = fh
        return fh


def save_checkpoint(
    out: Path, settings: Mapping[str, Any], top: TopK, *, images: int, ledger_bytes: int
) -> None:
    """Write the state atomically (``OutputError`` when the folder cannot be written); the
    ledger's first ``ledger_bytes`` (flushed before) list its ``images``."""
    from actviz.output import atomic_path

    keys = list(top.layers)
    meta = {
        "format": _FORMAT,
        "settings": json.loads(json.dumps(settings, default=str)),
        "k": top.k,
        "images": images,
        "ledger_bytes": ledger_bytes,
        "layers": [
            {
                "key": key,
                "images": top.layers[key].images,
                "sums": [str(s) for s in top.layers[key].sums],
            }
            for key in keys
        ],
    }
    arrays: dict[str, Any] = {"meta": np.array(json.dumps(meta, ensure_ascii=False))}
    for i, key in enumerate(keys):
        for name, array in top.layers[key].arrays().items():
            arrays[f"{i}.{name}"] = array
    with atomic_path(out / FILE) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **arrays)


def load_checkpoint(out: Path, settings: Mapping[str, Any]) -> Checkpoint | None:
    """The earlier state in ``out``, or None when there is none.

    Raises:
        OutputError: If it was written with other settings (a usage error: the message names
            them), or it is damaged.
    """
    path = out / FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("format") not in (1, _FORMAT):
                raise ValueError(f"format {meta.get('format')!r}")
            _check_settings(out, meta.get("settings", {}), settings)
            layers = {}
            for i, layer in enumerate(meta["layers"]):
                arrays = {name: data[f"{i}.{name}"] for name in ARRAY_FIELDS}
                sums = [int(s) for s in layer["sums"]]
                layers[layer["key"]] = LayerTop.from_arrays(arrays, layer["images"], sums)
            top = TopK(int(meta["k"]), layers)
            if meta["format"] == 1:
                done = tuple(str(p) for p in meta["done"])
                return Checkpoint(top, len(done), 0, done)
            return Checkpoint(top, int(meta["images"]), int(meta["ledger_bytes"]))
    except OutputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise OutputError(
            f"cannot resume from {path}: it is damaged ({type(exc).__name__}: {exc}); "
            "use --overwrite to start again"
        ) from None


def remove_checkpoint(out: Path) -> None:
    """Forget the earlier state (``--overwrite``)."""
    for name in (FILE, LEDGER):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()


def _check_settings(out: Path, earlier: Mapping[str, Any], now: Mapping[str, Any]) -> None:
    current = json.loads(json.dumps(now, default=str))
    changed = [
        f"{key}={_text(earlier.get(key))} (now {_text(current.get(key))})"
        for key in sorted(set(earlier) | set(current))
        if earlier.get(key) != current.get(key)
    ]
    if changed:
        raise OutputError(
            f"--resume: {out} holds top images of other settings ({', '.join(changed)}); "
            "use --overwrite or another --out",
            usage=True,
        )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
