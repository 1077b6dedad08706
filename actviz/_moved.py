"""Import paths and names renamed in this version, kept working for one release.

Importing a module by its old path (``actviz.examples``, ``actviz.images``, ...) warns with a
``DeprecationWarning`` that names the new path, and gives the module at its new path: the same
module object, so its classes are the ones the rest of actviz uses. An old package's
submodules move with it (``actviz.examples.scoring``). A name renamed in a package's face
(``actviz.top_images.ExamplesOptions``), or a name of a package's old face (``actviz.stats``
held the statistics: ``actviz.stats.Thresholds``), is given by that package's ``__getattr__``
through :func:`moved_name`, with the same warning.

Nothing here imports a module of actviz until an old path or name is used, and no torch.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # not at run time: importing it takes 10 ms

__all__ = ["FACES", "MOVED", "RENAMED", "install", "moved_name", "new_path"]

#: Old module path -> its new path; an old package's submodules move with it.
MOVED: dict[str, str] = {
    "actviz.examples": "actviz.top_images",
    "actviz.cameval": "actviz.cam_eval",
    "actviz.images": "actviz.io.images",
    "actviz.video": "actviz.io.video",
    "actviz.loader": "actviz.io.loader",
    # The notebook face was look/; notebook/ held the cards, which are cards/ now.
    "actviz.look": "actviz.notebook",
    "actviz.notebook.card": "actviz.cards.card",
    "actviz.notebook.cards": "actviz.cards.results",
    "actviz.notebook.dictionary": "actviz.cards.dictionary",
    "actviz.notebook.picture": "actviz.cards.picture",
    "actviz.notebook.thumbs": "actviz.cards.thumbs",
    "actviz.notebook.training": "actviz.cards.training",
    # The statistics were actviz.stats, which is now the stats command.
    **{
        f"actviz.stats.{module}": f"actviz.statistics.{module}"
        for module in (
            "anomalies",
            "collect",
            "compute",
            "layerstats",
            "pooled",
            "running",
            "sketch",
            "table",
        )
    },
}

#: ``module.old_name`` -> ``module.new_name``: names renamed in a package's face.
RENAMED: dict[str, str] = {
    "actviz.top_images.ExamplesOptions": "actviz.top_images.TopImagesOptions",
    # A sparse dictionary is a dictionary outside the sae command that trains it.
    "actviz.load_sae": "actviz.dictionary.load_dictionary",
    "actviz.dictionary.load_sae": "actviz.dictionary.load_dictionary",
    "actviz.dictionary.sae_bytes": "actviz.dictionary.dictionary_bytes",
    "actviz.notebook.sae_card": "actviz.cards.dictionary_card",
}

#: A package name whose old face is another package's now: an old name of it is the name in
#: that package's ``__all__``.
FACES: dict[str, str] = {
    "actviz.notebook": "actviz.cards",  # before the notebook face was notebook/
    "actviz.stats": "actviz.statistics",  # before actviz.stats was the command
}

_WHEN = "the old name goes in the next release"


def new_path(name: str) -> str | None:
    """The new path of the module an old path ``name`` names; None for a path that did not
    move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


def moved_name(module: str, name: str) -> Any:
    """For a package's module ``__getattr__``: what the old name ``name`` of ``module`` is
    now, with a warning naming the new one.

    Raises:
        AttributeError: For a name that was not renamed, as Python's own.
    """
    target = RENAMED.get(f"{module}.{name}")
    face = FACES.get(module)
    if target is None and face is not None and name in _face(face):
        target = f"{face}.{name}"
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new_module, _, new_name = target.rpartition(".")
    _warn(f"{module}.{name} is now {target}; {_WHEN}", callers=1)  # past the __getattr__
    return getattr(importlib.import_module(new_module), new_name)


def _face(package: str) -> tuple[str, ...]:
    return tuple(getattr(importlib.import_module(package), "__all__", ()))


def install() -> None:
    """Put the finder of old paths first on ``sys.meta_path`` (once): first, so that an old
    package's submodule is found at its new path, never loaded a second time from there."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())


class _OldPaths:
    """The finder: an old path's spec, whose loader gives the module at its new path."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        new = new_path(name)
        return None if new is None else ModuleSpec(name, cast("Loader", _Alias(new)))


class _Alias:
    """Loads an old path as the module at ``new`` (importing it if need be), and warns."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        _warn(f"{spec.name} is now {self.new}; {_WHEN}")
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Making the module set the old path's spec on it: the module keeps its own.
        module.__spec__ = self.spec


def _warn(message: str, callers: int = 0) -> None:
    """A DeprecationWarning attributed to the code that used the old path or name: past this
    module's frames, the import system's and ``callers`` more (so Python's default filters
    show it when that code is ``__main__``)."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None:
        if not _internal(frame):
            if not callers:
                break
            callers -= 1
        frame = frame.f_back
        # warnings counts the frames outside the import system only: so do we.
        level += not _bootstrap(frame)
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _internal(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename in (__file__, importlib.__file__) or _bootstrap(frame)


def _bootstrap(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename
