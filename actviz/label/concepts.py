"""The concepts of ``actviz label``, from what a user has: a CSV of tags, the folder's
subfolders as classes (pixel masks are read in :mod:`actviz.label.masks`, CLIP's words in
:mod:`actviz.label.clip`). Each becomes one boolean column over the images of the folder.

A tag file names images by their path relative to the folder (``a/x.jpg``), with or without
the extension, or by their file name or stem when only one image has it. Rows naming no image
of the folder are counted and named, never silently dropped.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import numpy.typing as npt

from actviz.errors import UsageError

__all__ = ["Concepts", "ImageKeys", "folder_classes", "read_tags"]

#: Unmatched names the warning and ``labels.json`` show (all are counted).
SHOWN = 20
_HEADERS = {"image", "images", "path", "file", "filename", "name"}
_SEPARATORS = (";", "|")


@dataclass(frozen=True, eq=False)
class Concepts:
    """Concepts as labels over the images of the folder.

    Attributes:
        source: ``tags``, ``classes``, ``masks`` or ``clip``.
        names: The concepts, in the order of ``labels``' columns.
        labels: ``(N, K)`` whether image ``i`` (in the folder's order) has concept ``k``.
        file: The file or folder they were read from (None for classes).
        unmatched: The first :data:`SHOWN` names in it that are no image of the folder.
        unmatched_count: How many there are.
        extra: What the source records beside (CLIP's checkpoint, mean and std, words).
    """

    source: str
    names: list[str]
    labels: npt.NDArray[np.bool_]
    file: str | None = None
    unmatched: list[str] = field(default_factory=list)
    unmatched_count: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    def describe_unmatched(self) -> str | None:
        """The warning about names that are no image of the folder, or None."""
        if not self.unmatched_count:
            return None
        shown = ", ".join(self.unmatched[:5]) + (", ..." if self.unmatched_count > 5 else "")
        return (
            f"{self.unmatched_count} name(s) in {self.file} are no image of the folder and were "
            f"left out ({shown}); name images by their path relative to the folder"
        )


class ImageKeys:
    """Finds an image of the folder by the ways a user names it."""

    def __init__(self, rels: Sequence[PurePosixPath], paths: Sequence[Path]) -> None:
        self._exact: dict[str, int] = {}
        by_name: dict[str, list[int]] = {}
        by_stem: dict[str, list[int]] = {}
        for i, (rel, path) in enumerate(zip(rels, paths, strict=True)):
            text = rel.as_posix()
            self._exact.setdefault(text, i)
            self._exact.setdefault(str(PurePosixPath(text).with_suffix("")), i)
            self._exact.setdefault(str(path.resolve()), i)
            by_name.setdefault(rel.name, []).append(i)
            by_stem.setdefault(rel.stem, []).append(i)
        self._unique = {k: v[0] for k, v in {**by_stem, **by_name}.items() if len(v) == 1}

    def find(self, name: str) -> int | None:
        """The index of the image ``name`` names, or None."""
        text = name.strip().replace("\\", "/")
        while text.startswith("./"):
            text = text[2:]
        if not text:
            return None
        for key in (text, str(PurePosixPath(text).with_suffix(""))):
            if key in self._exact:
                return self._exact[key]
        resolved = str(Path(text).resolve()) if Path(text).is_absolute() else None
        if resolved is not None and resolved in self._exact:
            return self._exact[resolved]
        return self._unique.get(text)


def read_tags(path: Path, rels: Sequence[PurePosixPath], paths: Sequence[Path]) -> Concepts:
    """``--tags FILE.csv``: rows of ``image,tag`` (an image on several rows, or several tags in
    one cell separated by ``;`` or ``|``, or in further columns); a first row ``image,tag`` is
    a header.

    Raises:
        UsageError: When the file cannot be read, holds no tag, or names no image of the
            folder.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"--tags {path}: no such file; give a CSV of image,tag rows") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--tags {path} cannot be read as UTF-8 text: {exc}") from None
    keys = ImageKeys(rels, paths)
    tagged: dict[str, set[int]] = {}
    unmatched: dict[str, None] = {}
    rows = 0
    for number, row in enumerate(csv.reader(text.splitlines())):
        cells = [c.strip() for c in row]
        if not cells or not any(cells):
            continue
        if number == 0 and cells[0].lower() in _HEADERS and keys.find(cells[0]) is None:
            continue  # a header row
        tags = [t.strip() for cell in cells[1:] for t in _split(cell) if t.strip()]
        if not tags:
            continue
        rows += 1
        index = keys.find(cells[0])
        if index is None:
            unmatched.setdefault(cells[0], None)
            continue
        for tag in tags:
            tagged.setdefault(tag, set()).add(index)
    if rows == 0:
        raise UsageError(
            f"--tags {path} holds no tag; write one image,tag row per tag (e.g. a/x.jpg,red)"
        )
    if not tagged:
        first = next(iter(unmatched))
        raise UsageError(
            f"none of the {len(unmatched)} image(s) named in {path} is in the folder (first: "
            f"{first}); name images by their path relative to the folder"
        )
    names = sorted(tagged)
    labels = np.zeros((len(rels), len(names)), dtype=bool)
    for k, name in enumerate(names):
        labels[sorted(tagged[name]), k] = True
    missing = list(unmatched)
    return Concepts(
        source="tags",
        names=names,
        labels=labels,
        file=str(path),
        unmatched=missing[:SHOWN],
        unmatched_count=len(missing),
    )


def _split(cell: str) -> list[str]:
    parts = [cell]
    for separator in _SEPARATORS:
        parts = [p for part in parts for p in part.split(separator)]
    return parts


def folder_classes(rels: Sequence[PurePosixPath], folder: Path) -> Concepts:
    """``--classes``: each subfolder of the folder is a concept, holding the images under it
    (images directly in the folder have none).

    Raises:
        UsageError: When the folder has no subfolder holding images.
    """
    classes = sorted({rel.parts[0] for rel in rels if len(rel.parts) > 1})
    if not classes:
        raise UsageError(
            f"--classes takes the subfolders of {folder} as concepts, and its images are not "
            "in subfolders; put each class in a subfolder, or give --tags"
        )
    column = {name: k for k, name in enumerate(classes)}
    labels = np.zeros((len(rels), len(classes)), dtype=bool)
    for i, rel in enumerate(rels):
        if len(rel.parts) > 1:
            labels[i, column[rel.parts[0]]] = True
    return Concepts(source="classes", names=classes, labels=labels)
