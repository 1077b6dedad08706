"""The journal ``--resume`` reads (label's; tcav's is written the same way): the settings,
then one line per batch with what the batch
added (its images' scores per layer and their pixel features; with masks, the values that can
still be among each unit's top quantile, then in a second pass the masks' counts), each array
as base64 of its bytes. Small: a batch of 8 images and 512 units is 16 KB of scores.

A line cut short by a kill is never read; a resumed run redoes that batch's images.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.command.ledger import journal_records, line, resumable

__all__ = ["LEDGER", "decode", "encode", "line", "read_ledger"]

LEDGER = "label.jsonl"


def encode(array: npt.ArrayLike, dtype: str) -> str:
    """An array as base64 of its bytes in ``dtype`` (little-endian)."""
    data = np.ascontiguousarray(np.asarray(array), dtype=np.dtype(dtype).newbyteorder("<"))
    return base64.b64encode(data.tobytes()).decode("ascii")


def decode(text: str, dtype: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
    """The array :func:`encode` wrote, in the native byte order."""
    data = np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))
    return data.astype(np.dtype(dtype)).reshape(shape)


def read_ledger(
    out: Path,
    settings: Mapping[str, Any],
    *,
    resume: bool,
    name: str = LEDGER,
    what: str = "label",
) -> Iterator[dict[str, Any]]:
    """With ``resume``: the batch records of an earlier run with the same settings (none
    without it, or when there is no journal yet), from the journal ``name`` of the command
    ``what``.

    Raises:
        UsageError: For a folder that holds files but no such journal, or one written with
            other settings.
    """
    if resume and resumable(out, name, f"{what} run"):
        yield from journal_records(out, out / name, settings)
