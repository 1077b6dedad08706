"""Safe file and folder names for layers and images."""

from __future__ import annotations

import hashlib
import itertools
import unicodedata
from collections.abc import Sequence
from pathlib import PurePosixPath

__all__ = ["COMMAND_DIRS", "REPORT_DIR", "image_dirs", "layer_filename", "safe_name"]

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


def order_width(count: int) -> int:
    """The digits of a layer's place among ``count`` layers in its file name: at least two,
    and as many as the last place needs, so that the files sort in capture order."""
    return max(2, len(str(count - 1)))


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
        names = itertools.chain(
            [stem, safe_name(f"{stem}_{rel.suffix.lstrip('.')}")],
            (f"{stem}-{n}" for n in itertools.count(2)),
        )
        paths = (PurePosixPath(*parts, name) for name in names)
        chosen = next(path for path in paths if _folded(path) not in taken)
        taken.add(_folded(chosen))
        result.append(chosen)
    return result


def _folded(path: PurePosixPath) -> str:
    """The key under which a case-insensitive file system would find ``path``."""
    return unicodedata.normalize("NFC", str(path).casefold())
