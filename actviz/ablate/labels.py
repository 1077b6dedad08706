"""Each image's class: its class subfolder (the names matched to the model's own class names
where it has them, else numbered in sorted order as torchvision's ``ImageFolder`` numbers
them), a CSV file, or none: then each image's class is the unablated model's own prediction,
and accuracy reads as agreement with it."""

from __future__ import annotations

import csv
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from actviz.errors import UsageError

if TYPE_CHECKING:
    from actviz.io.images import ImageInput

__all__ = ["Labels", "read_labels"]

Source = Literal["folders", "csv", "agreement"]


@dataclass(frozen=True)
class Labels:
    """Where the classes come from and each image's.

    Attributes:
        source: ``folders``, ``csv``, or ``agreement`` (the model's own predictions).
        of: Image (its path relative to its folder, as the outputs name it) -> class index.
        names: Class index -> its name, for the classes the labels name.
        says: How the classes were found, in words (the JSON, the page, the terminal).
        file: The CSV file, for ``csv``.
    """

    source: Source
    of: dict[str, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    says: str = ""
    file: Path | None = None

    @property
    def agreement(self) -> bool:
        return self.source == "agreement"

    def describe(self) -> dict[str, object]:
        return {
            "source": self.source,
            "says": self.says,
            "file": str(self.file) if self.file is not None else None,
            "classes": len(set(self.of.values())) if self.of else None,
        }


AGREEMENT = (
    "no labels: each image's class is the unablated model's own prediction, so accuracy is "
    "agreement with it"
)


def _key(name: str) -> str:
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def _matched(
    names: Sequence[str], categories: Sequence[str] | None, model: str, what: str
) -> tuple[dict[str, int], str]:
    """Class index per name: the model's own class of that name, else sorted order.

    Raises:
        UsageError: When the model has class names and some names are none of them.
    """
    if categories:
        known: dict[str, int] = {}
        for index, name in enumerate(categories):
            known.setdefault(_key(name), index)
        missing = [n for n in names if _key(n) not in known]
        if not missing:
            return {n: known[_key(n)] for n in names}, f"{what} matched to {model}'s class names"
        close = difflib.get_close_matches(_key(missing[0]), list(known), n=3)
        hint = f" (close: {', '.join(close)})" if close else ""
        raise UsageError(
            f"{what} '{missing[0]}' is not one of {model}'s {len(categories)} class "
            f"names{hint}; rename it to a class name, give --labels FILE.csv, or --labels none "
            "to measure agreement with the model's own predictions"
        )
    ordered = sorted(set(names))
    return (
        {n: i for i, n in enumerate(ordered)},
        f"{what} numbered in sorted order, as torchvision's ImageFolder numbers them",
    )


def unique_names(images: Sequence[ImageInput]) -> list[str]:
    """Each image's name in the outputs: its path relative to the folder it was found in,
    ``(2)``, ``(3)`` ... added where two inputs hold the same one."""
    taken: set[str] = set()
    names = []
    for item in images:
        rel = item.rel.as_posix()
        name, n = rel, 1
        while name in taken:
            n += 1
            name = f"{rel} ({n})"
        taken.add(name)
        names.append(name)
    return names


def read_labels(
    images: Sequence[ImageInput],
    spec: str | None,
    *,
    categories: Sequence[str] | None,
    model: str,
) -> Labels:
    """The classes of ``images`` (``of`` keyed by :func:`unique_names`): ``spec`` None reads
    class subfolders when every image is in one and asks for agreement when none is;
    ``none`` asks for agreement; any other value is a CSV file of ``image,label`` rows.

    Raises:
        UsageError: For images in subfolders beside images that are not, names the model
            does not know, or a CSV file that cannot be read or misses images.
    """
    if spec is not None and spec.strip().lower() == "none":
        return Labels("agreement", says=AGREEMENT)
    if spec is not None and spec.strip().lower() != "folders":
        return _from_csv(Path(spec), images, categories, model)
    nested = [item for item in images if len(item.rel.parts) > 1]
    if not nested:
        if spec is not None:
            raise UsageError(
                "--labels folders: no image is in a class subfolder; put each class's images "
                "in a folder named after it, or use --labels none"
            )
        return Labels("agreement", says=AGREEMENT)
    if len(nested) < len(images):
        loose = next(item for item in images if len(item.rel.parts) == 1)
        raise UsageError(
            f"{len(images) - len(nested)} image(s) are outside class subfolders (first: "
            f"{loose.path}); move them into a class folder, or give --labels FILE.csv or "
            "--labels none"
        )
    folder = {
        name: item.rel.parts[0] for name, item in zip(unique_names(images), images, strict=True)
    }
    index, says = _matched(sorted(set(folder.values())), categories, model, "class folder")
    return Labels(
        "folders",
        of={rel: index[name] for rel, name in folder.items()},
        names={i: _name(i, name, categories) for name, i in index.items()},
        says=f"class subfolders, {says}",
    )


def _name(index: int, name: str, categories: Sequence[str] | None) -> str:
    return categories[index] if categories and index < len(categories) else name


def _from_csv(
    path: Path, images: Sequence[ImageInput], categories: Sequence[str] | None, model: str
) -> Labels:
    """``image,label`` rows: an image by its path relative to its folder or its file name, a
    label by class index or name."""
    rows = dict(_csv_rows(path))
    rows = {image.replace("\\", "/").removeprefix("./"): label for image, label in rows.items()}
    by_file: dict[str, int] = {}
    for item in images:
        by_file[item.path.name] = by_file.get(item.path.name, 0) + 1
    given: dict[str, str] = {}
    missing = []
    for name, item in zip(unique_names(images), images, strict=True):
        rel = item.rel.as_posix()
        label = rows.get(rel)
        if label is None and by_file[item.path.name] == 1:
            label = rows.get(item.path.name)
        if label is None:
            missing.append(rel)
        else:
            given[name] = label
    if missing:
        raise UsageError(
            f"--labels {path} has no row for {len(missing)} of the {len(images)} images "
            f"(first: {missing[0]}); add an 'image,label' row for each"
        )
    if all(label.lstrip("-").isdigit() for label in given.values()):
        of = {rel: int(label) for rel, label in given.items()}
        bad = next((i for i in of.values() if i < 0), None)
        if bad is not None:
            raise UsageError(f"--labels {path}: class index {bad} is below 0")
        return Labels(
            "csv",
            of=of,
            names={i: _name(i, f"class {i}", categories) for i in set(of.values())},
            says=f"{path.name}: class indices",
            file=path,
        )
    index, says = _matched(sorted(set(given.values())), categories, model, "label")
    return Labels(
        "csv",
        of={rel: index[label] for rel, label in given.items()},
        names={i: _name(i, name, categories) for name, i in index.items()},
        says=f"{path.name}: {says}",
        file=path,
    )


def _csv_rows(path: Path) -> list[tuple[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            table = [row for row in csv.reader(fh) if row and any(c.strip() for c in row)]
    except FileNotFoundError:
        raise UsageError(
            f"--labels {path}: no such file; give a CSV of image,label rows, 'none' or 'folders'"
        ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"--labels {path} cannot be read as CSV ({exc})") from None
    if table and [c.strip().lower() for c in table[0][:2]] == ["image", "label"]:
        table = table[1:]
    short = next((row for row in table if len(row) < 2), None)
    if short is not None or not table:
        raise UsageError(
            f"--labels {path} must hold 'image,label' rows (a header of those names is optional)"
        )
    return [(row[0].strip(), row[1].strip()) for row in table]
