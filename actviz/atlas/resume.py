"""The forward part's resumable state: the points kept so far, in parts.

Every few hundred images the points of the images since the last part go to one ``npz`` file
(``OUT/.actviz-atlas/part-NNNNNN.npz``, written under a temporary name and renamed), and one
line naming it and its images is appended to ``OUT/.actviz-atlas/forward.jsonl`` after it.
A part without its line (the run stopped between the two) is never read, and the next part
of that number replaces it. The first line holds the forward's settings: ``--resume`` takes
the earlier points only when the model, weights, layer and points are the same, and makes the
layout, cells and pictures again from them (another ``--grid`` or ``--reduce`` needs no
forward). Files are read with ``allow_pickle=False``: a file in an output folder is never a
way to run code.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actviz import output
from actviz.atlas.points import PointStore
from actviz.command.ledger import journal_records
from actviz.errors import OutputError

__all__ = ["FOLDER", "JOURNAL", "Earlier", "Parts", "load_earlier"]

FOLDER = ".actviz-atlas"
JOURNAL = f"{FOLDER}/forward.jsonl"
#: Images per part at most.
PART_IMAGES = 512


@dataclass
class Earlier:
    """What an earlier run with the same settings kept: the images its parts cover (their
    points now in the stores; the images that failed are run again), and how many parts its
    journal lists."""

    done: set[str] = field(default_factory=set)
    parts: int = 0


def _line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def load_earlier(
    out: Path,
    settings: Mapping[str, Any],
    rels: Sequence[str],
    stores: Sequence[PointStore],
    predictions: Sequence[np.ndarray],
) -> Earlier:
    """Fill ``stores`` and ``predictions`` (one per side, indexed like ``rels``) from the
    parts an earlier run wrote; the images they cover.

    Raises:
        UsageError: When the folder holds an atlas of other forward settings.
        OutputError: When a part its journal names is missing or damaged.
    """
    earlier = Earlier()
    index = {rel: i for i, rel in enumerate(rels)}
    for record in journal_records(out, out / JOURNAL, settings):
        if "part" not in record:
            continue
        earlier.parts += 1
        _read_part(out / FOLDER / str(record["part"]), record, index, stores, predictions)
        earlier.done.update(rel for rel in record.get("images", []) if rel in index)
    return earlier


def _read_part(
    path: Path,
    record: Mapping[str, Any],
    index: Mapping[str, int],
    stores: Sequence[PointStore],
    predictions: Sequence[np.ndarray],
) -> None:
    images = [str(r) for r in record.get("images", [])]
    try:
        with np.load(path, allow_pickle=False) as data:
            for side, store in enumerate(stores):
                vectors, positions = data[f"vectors{side}"], data[f"positions{side}"]
                preds = data[f"predictions{side}"]
                rows = vectors.shape[0] // max(1, len(images))
                for j, rel in enumerate(images):
                    i = index.get(rel)
                    if i is None:
                        continue  # no longer among the inputs
                    store.put(
                        i, vectors[j * rows : (j + 1) * rows], positions[j * rows : (j + 1) * rows]
                    )
                    predictions[side][i] = preds[j]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise OutputError(
            f"cannot resume from {path}: it is missing or damaged ({type(exc).__name__}); "
            "use --overwrite to start again"
        ) from None


class Parts:
    """The journal and the parts this run adds, for the block: :meth:`add` per finished
    image, :meth:`flush` writes the part of the images since the last one.

    Args:
        out: The output folder.
        settings: The forward's settings (the journal's first line).
        stores: Per side, the points.
        predictions: Per side, each image's prediction (-1 none).
        rels: Each image's name.
        fresh: Start the journal again (no earlier run is resumed).
        parts: How many parts the journal lists already.
    """

    def __init__(
        self,
        out: Path,
        settings: Mapping[str, Any],
        stores: Sequence[PointStore],
        predictions: Sequence[np.ndarray],
        rels: Sequence[str],
        *,
        fresh: bool,
        parts: int,
    ) -> None:
        self.out = out
        self.stores = stores
        self.predictions = predictions
        self.rels = rels
        self.journal = output.Journal(out / JOURNAL, keep=0 if fresh else None)
        self._head = [_line({"settings": json.loads(json.dumps(settings, default=str))})]
        if not fresh:
            self._head = []
        self.count = parts
        self._images: list[int] = []
        self._failed: dict[str, str] = {}

    def add(self, index: int) -> None:
        """Image ``index`` is in the stores."""
        self._images.append(index)
        if len(self._images) >= PART_IMAGES:
            self.flush()

    def fail(self, index: int, error: str) -> None:
        """Image ``index`` could not be read (recorded with the next part)."""
        self._failed[self.rels[index]] = error

    def flush(self) -> None:
        """Write the part of the images since the last one, then its journal line."""
        if not self._images and not self._failed:
            return
        self.count += 1
        name = f"part-{self.count:06d}.npz"
        arrays: dict[str, Any] = {}
        for side, store in enumerate(self.stores):
            rows = [store.rows_of(i) for i in self._images]
            channels = store.vectors.shape[1] if store.vectors is not None else 0
            arrays[f"vectors{side}"] = (
                np.concatenate([r[0] for r in rows])
                if rows
                else np.zeros((0, channels), np.float32)
            )
            arrays[f"positions{side}"] = (
                np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, np.int32)
            )
            arrays[f"predictions{side}"] = np.asarray(
                [self.predictions[side][i] for i in self._images], np.int32
            )
        with output.atomic_file(self.out / FOLDER / name) as fh:
            np.savez(fh, **arrays)
        for line in self._head:
            self.journal.append(line)
        self._head = []
        images = [self.rels[i] for i in self._images]
        self.journal.append(_line({"part": name, "images": images, "failed": self._failed}))
        self.journal.sync()
        self._images, self._failed = [], {}

    def close(self) -> None:
        """Close the journal (synced)."""
        self.journal.close()
