"""The resume files: the accumulator, and a ledger of the images it covers.

``OUT/.actviz-top-images.npz`` holds every layer's :class:`~actviz.top_images.topk.LayerTop`
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
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actviz.command.resume import check_settings
from actviz.errors import OutputError
from actviz.output import Journal, atomic_file
from actviz.top_images.topk import ARRAY_FIELDS, LayerTop, TopK

__all__ = [
    "FILE",
    "LEDGER",
    "Checkpoint",
    "Ledger",
    "load_checkpoint",
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
        journal = Journal(out / LEDGER)
        if self.ledger_bytes and not journal.covers(self.ledger_bytes):
            raise OutputError(
                f"cannot resume from {out / FILE}: {journal.path} is missing or shorter than "
                "the state it belongs to; use --overwrite to start again"
            )
        for _, line in journal.lines(end=self.ledger_bytes):
            with contextlib.suppress(ValueError):  # a line cut short: never covered
                paths = json.loads(line)
                if isinstance(paths, list):
                    yield from (str(p) for p in paths)


class Ledger:
    """The append-only list of merged images (one JSON line per batch), kept open for the run.

    Opened at the length the loaded state covers, so lines it never saw are dropped.
    """

    def __init__(self, out: Path, keep: Checkpoint | None) -> None:
        self.path = out / LEDGER
        covered = 0 if keep is None or keep.done is not None else keep.ledger_bytes
        self._journal = Journal(self.path, keep=covered, error=_ledger_error)
        self._keep = keep

    @property
    def size(self) -> int:
        """The ledger's length after the last batch appended."""
        return self._journal.size

    def append(self, paths: list[str]) -> int:
        """Append one batch's paths; the ledger's length after them."""
        keep, self._keep = self._keep, None
        if keep is not None and keep.done:  # a format 1 state: its list moves here
            self._journal.append(_paths_line(list(keep.done)))
        self._journal.append(_paths_line(paths))
        return self._journal.size

    def flush(self) -> None:
        """Everything appended so far on disk, before a state that covers it is written."""
        self._journal.sync()

    def close(self) -> None:
        """Close the file (syncing it)."""
        with contextlib.suppress(OutputError):
            self._journal.close()


def _paths_line(paths: list[str]) -> bytes:
    # ASCII with escapes: any path, undecodable names included, reads back the same.
    return json.dumps(paths).encode("ascii") + b"\n"


def _ledger_error(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {exc}")


def save_checkpoint(
    out: Path, settings: Mapping[str, Any], top: TopK, *, images: int, ledger_bytes: int
) -> None:
    """Write the state atomically (``OutputError`` when the folder cannot be written); the
    ledger's first ``ledger_bytes`` (flushed before) list its ``images``."""
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
    with atomic_file(out / FILE) as fh:
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
            check_settings(out, meta.get("settings", {}), settings)
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
