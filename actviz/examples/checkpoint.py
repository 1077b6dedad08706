"""The resume file: the accumulator and the images it covers, written atomically together.

``OUT/.actviz-top-images.npz`` holds every layer's :class:`~actviz.examples.topk.LayerTop`
arrays, and a JSON record of the settings, the images already merged and the exact sums. It
is an ``npz`` read with ``allow_pickle=False``: a file in an output folder is never a way to
run code. Written under a temporary name and renamed into place, so the state and the list of
done images always belong together, whenever the run is stopped.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actviz.errors import OutputError
from actviz.examples.topk import ARRAY_FIELDS, LayerTop, TopK

__all__ = ["FILE", "Checkpoint", "load_checkpoint", "save_checkpoint"]

FILE = ".actviz-top-images.npz"
_FORMAT = 1


class Checkpoint:
    """What an earlier run of the same settings had done: its accumulator and done images."""

    def __init__(self, top: TopK, done: Sequence[str]) -> None:
        self.top = top
        self.done = list(done)


def save_checkpoint(out: Path, settings: Mapping[str, Any], top: TopK, done: Sequence[str]) -> None:
    """Write the state atomically (``OutputError`` when the folder cannot be written)."""
    from actviz.output import atomic_path

    keys = list(top.layers)
    meta = {
        "format": _FORMAT,
        "settings": json.loads(json.dumps(settings, default=str)),
        "k": top.k,
        "done": list(done),
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
            if meta.get("format") != _FORMAT:
                raise ValueError(f"format {meta.get('format')!r}")
            _check_settings(out, meta.get("settings", {}), settings)
            layers = {}
            for i, layer in enumerate(meta["layers"]):
                arrays = {name: data[f"{i}.{name}"] for name in ARRAY_FIELDS}
                sums = [int(s) for s in layer["sums"]]
                layers[layer["key"]] = LayerTop.from_arrays(arrays, layer["images"], sums)
            return Checkpoint(TopK(int(meta["k"]), layers), [str(p) for p in meta["done"]])
    except OutputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise OutputError(
            f"cannot resume from {path}: it is damaged ({type(exc).__name__}: {exc}); "
            "use --overwrite to start again"
        ) from None


def remove_checkpoint(out: Path) -> None:
    """Forget the earlier state (``--overwrite``)."""
    with contextlib.suppress(FileNotFoundError):
        (out / FILE).unlink()


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
