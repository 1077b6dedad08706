"""Python's cyclic garbage collector in an ``actviz`` process: paused while torch and
torchvision import, and kept off the objects that live until the process ends.

Importing torch and torchvision makes about 350,000 objects that stay until the process
exits. The collector's full passes, triggered by that many new objects, walk all of them
again and again: six passes during the imports and more while the interpreter tears down,
0.65-0.84 s and 0.9-1.2 s of a 5-6 s ``actviz run`` of one image on a 2-core machine. Paused
while they import and then frozen (``gc.freeze``: moved where no pass looks), they cost
neither; the collector still runs for everything made afterwards. The garbage the imports
leave in cycles (about 9,000 objects for torch and torchvision) is frozen with them: finding
it would take one full pass.

Only for the process's own command line (:func:`own_process`): cycles among frozen objects
are never collected (reference counting still frees the rest), and ``gc.get_objects`` no
longer sees them, which is right for a process that ends with its command and wrong for a
Python session (or a test) that calls the command in-process and goes on.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["FRAMEWORKS", "at_exit", "own_process", "paused"]

#: The imports the collector is paused for: whichever comes first imports torch; timm's and
#: transformers' own modules come after it (40-50 ms of passes less on this machine).
FRAMEWORKS = frozenset({"torch", "torchvision", "timm", "transformers"})


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection in the block; when it ends without an error, every object then alive is
    frozen (the whole process's: ``gc.freeze`` has no narrower form)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if enabled:
            gc.enable()


_MISSING = object()


class _PausedImports:
    """A meta path finder (``importlib.abc`` is not imported for it: 3 ms of ``--help``) that
    finds nothing itself: for a framework's top-level import it hands back the spec the other
    finders give, its loader's ``exec_module`` wrapped in :func:`paused` for that one module
    (a loader may serve several, as a zip's does) and put back as it runs. A framework that
    imported is cached, so it passes here once."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in FRAMEWORKS:
            return None
        spec = _found(self, fullname, path, target)
        loader = spec.loader if spec is not None else None
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec  # not a plain install: imported as usual
        run = loader.exec_module
        own = getattr(loader, "__dict__", {}).get("exec_module", _MISSING)

        def exec_module(module: ModuleType) -> None:
            if own is _MISSING:
                delattr(loader, "exec_module")
            else:
                setattr(loader, "exec_module", own)  # noqa: B010 - an instance's method
            if module.__name__ != fullname:
                run(module)
                return
            with paused():
                run(module)

        # A loader that takes no attributes (slots, C) imports as usual.
        with contextlib.suppress(AttributeError, TypeError):
            setattr(loader, "exec_module", exec_module)  # noqa: B010 - an instance's method
        return spec


def _found(
    me: object, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> ModuleSpec | None:
    """The spec the other finders give: the first one's that has ``find_spec`` (a finder
    with only the older ``find_module`` is not asked)."""
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is me or find is None:
            continue
        spec: ModuleSpec | None = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


def own_process() -> None:
    """For ``actviz`` run as its own process: pause the collector while the frameworks import
    (once, however often this is called)."""
    if not any(isinstance(finder, _PausedImports) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PausedImports())


def at_exit() -> None:
    """Before the process ends: freeze what is alive, so that tearing the interpreter down
    does not walk it (files are written and closed by now; finalizers are not promised at
    exit anyway)."""
    gc.freeze()
