"""The user's own models: ``package.module:factory`` or ``path/to/file.py:factory``.

Loading a factory runs the user's code: the module (or file) is imported, with everything its
top level does, and the factory is called to build the model. Only point actviz at code you
trust, as you would with ``python file.py``.

- ``package.module:factory`` is imported with :func:`importlib.import_module`; the current
  folder is searchable while importing, as with ``python -m``.
- ``path/to/file.py:factory`` is loaded under a module name of its own, so two files both
  called ``model.py`` do not clash; its folder is searchable only while it is imported and
  while the factory runs, so ``import helpers`` next to it works. Sibling modules imported
  this way stay in ``sys.modules`` under their plain names, as any import would.
- ``factory`` may be a function, an ``nn.Module`` subclass, a dotted path to either
  (``Net.build``), or a module instance.

Nothing is written: bytecode caches are not created next to the user's files.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError, first_line

if TYPE_CHECKING:
    from torch import nn

__all__ = ["build_user_model", "is_factory_spec", "load_factory", "split_factory_spec"]

_ATTRIBUTE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_MODULE_PATH = _ATTRIBUTE_PATH


def is_factory_spec(model: str) -> bool:
    """True when MODEL names the user's factory rather than a torchvision model.

    torchvision names never contain ``:`` nor end in ``.py``, so either marks a factory:
    ``pkg.models:build``, ``nets/tiny.py:Tiny``, ``nets/tiny.py`` (factory missing: an error
    that says so).
    """
    text = model.strip()
    return ":" in text or text.endswith(".py")


def split_factory_spec(spec: str) -> tuple[str, str]:
    """Split a factory spec into its module or file part and its attribute path.

    The split is at the last ``:``, so a Windows path (``C:\\nets\\tiny.py:build``) works.

    Raises:
        UsageError: If the factory part is missing or is not a dotted Python name.
    """
    text = spec.strip()
    target, sep, attribute = text.rpartition(":")
    if not sep:
        target, attribute = text, ""
    if not target or not attribute:
        example = target or "package.module"
        raise UsageError(
            f"'{spec}' names no factory; write MODULE:FACTORY, e.g. {example}:build_model"
        )
    if not _ATTRIBUTE_PATH.fullmatch(attribute):
        raise UsageError(
            f"'{attribute}' in '{spec}' is not a Python name; write MODULE:FACTORY with a "
            "function or class name after the colon (dots allowed: Net.build)"
        )
    return target, attribute


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """Import the factory a spec names, without calling it.

    This imports the user's module or file, which runs its top-level code.

    Args:
        spec: ``package.module:factory`` or ``path/to/file.py:factory``; ``factory`` may be
            a dotted path (``Net.build``).

    Returns:
        A callable that takes the factory's keyword arguments, calls it, and returns the
        checked ``nn.Module``.

    Raises:
        UsageError: If the spec is malformed, the file does not exist, or the attribute is
            missing (close names are suggested) or not callable.
        ModelError: If the module cannot be imported.
    """
    target, attribute = split_factory_spec(spec)
    module, folder = _import_target(target)
    factory = _resolve_attribute(module, attribute, target)

    from torch import nn

    if isinstance(factory, nn.Module):
        # A ready-made instance: calling it would run its forward, so hand it back as is.
        instance = factory

        def given(**kwargs: Any) -> nn.Module:
            if kwargs:
                raise UsageError(
                    f"{spec} is a module instance and takes no arguments; point MODEL at "
                    "the function or class that builds it"
                )
            return _checked(instance, spec)

        return given
    if not callable(factory):
        raise UsageError(
            f"{spec} is a {type(factory).__name__}, not a function or nn.Module class; "
            "point MODEL at the function that builds the model"
        )

    def build(**kwargs: Any) -> nn.Module:
        # Searchable again while the factory runs, for imports it makes lazily.
        try:
            with _searchable(folder), _no_bytecode():
                made = factory(**kwargs)
        except Exception as exc:  # the user's code: any failure is reported the same way
            raise ModelError(
                f"factory {spec} raised {type(exc).__name__}: {first_line(exc)}; "
                "fix the factory or call it yourself to see the traceback"
            ) from exc
        return _checked(made, spec)

    return build


def build_user_model(spec: str, **kwargs: Any) -> nn.Module:
    """Import a factory and build the model with it (this runs the user's code).

    Args:
        spec: ``package.module:factory`` or ``path/to/file.py:factory``.
        **kwargs: Passed to the factory.

    Returns:
        The model the factory built, as it built it (not moved, not put in eval mode).

    Raises:
        UsageError: If the spec is malformed, the file is missing, or the attribute is not
            found or not callable.
        ModelError: If the import fails, the factory raises, or it returns something that is
            not an eager ``nn.Module`` (TorchScript and ``torch.compile`` results are refused:
            their forward hooks may not fire).

    Example:
        >>> model = build_user_model("nets/tiny.py:build", width=8)
    """
    return load_factory(spec)(**kwargs)


def _checked(made: object, spec: str) -> nn.Module:
    import torch
    from torch import nn

    if isinstance(made, torch.jit.ScriptModule):
        raise ModelError(
            f"factory {spec} returned a TorchScript module, whose forward hooks do not fire "
            "reliably; return the eager nn.Module instead"
        )
    if isinstance(made, nn.Module) and hasattr(made, "_orig_mod"):
        raise ModelError(
            f"factory {spec} returned a torch.compile'd module, which may skip forward hooks; "
            "return the module before compiling it"
        )
    if not isinstance(made, nn.Module):
        raise ModelError(
            f"factory {spec} returned {type(made).__name__}, not a torch.nn.Module; "
            "make it return the model instance"
        )
    return made


def _looks_like_path(target: str) -> bool:
    return (
        target.endswith(".py")
        or "/" in target
        or os.sep in target
        or (os.altsep is not None and os.altsep in target)
    )


def _import_target(target: str) -> tuple[ModuleType, Path]:
    """The imported module, and the folder that was searchable while importing it."""
    if _looks_like_path(target):
        path = Path(target).expanduser()
        return _import_file(path), path.resolve().parent
    if not _MODULE_PATH.fullmatch(target):
        raise UsageError(
            f"'{target}' is neither a Python module path (package.module) nor a .py file; "
            "write package.module:factory or path/to/file.py:factory"
        )
    cwd = Path.cwd()
    with _searchable(cwd), _no_bytecode():
        try:
            return importlib.import_module(target), cwd
        except ModuleNotFoundError as exc:
            where = (
                "; install it, run from the folder that holds it, or use path/to/file.py:factory"
                if exc.name is not None and target.split(".")[0] == exc.name.split(".")[0]
                else ""
            )
            raise ModelError(f"cannot import {target}: {first_line(exc)}{where}") from exc
        except Exception as exc:  # the user's module failed while running its top level
            raise ModelError(
                f"cannot import {target}: {type(exc).__name__}: {first_line(exc)}"
            ) from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        what = "is a folder, not a .py file" if path.is_dir() else "does not exist"
        raise UsageError(f"model file {path} {what}; check the path before the ':'")
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode(), usedforsecurity=False).hexdigest()[:12]
    stem = re.sub(r"\W", "_", resolved.stem)
    name = f"actviz_user_{stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as Python source; give a .py file")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, as a normal import would be, so that dataclasses and
    # pickling inside the file can find their own module.
    sys.modules[name] = module
    with _searchable(resolved.parent), _no_bytecode():
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file failed while running its top level
            sys.modules.pop(name, None)
            raise ModelError(
                f"cannot import {path}: {type(exc).__name__}: {first_line(exc)}"
            ) from exc
    return module


def _resolve_attribute(module: ModuleType, attribute: str, target: str) -> Any:
    obj: Any = module
    walked: list[str] = []
    for part in attribute.split("."):
        if not hasattr(obj, part):
            owner = ".".join([target, *walked]) if walked else target
            raise UsageError(f"{owner} has no attribute '{part}'{_suggest(obj, part)}")
        obj = getattr(obj, part)
        walked.append(part)
    return obj


def _suggest(obj: object, missing: str) -> str:
    names = [n for n in dir(obj) if not n.startswith("_")]
    close = difflib.get_close_matches(missing, names, n=5, cutoff=0.6)
    if close:
        return f"; close: {', '.join(close)}"
    callables = [n for n in names if callable(getattr(obj, n, None))]
    if callables:
        more = f" (+{len(callables) - 8} more)" if len(callables) > 8 else ""
        return f"; it has: {', '.join(callables[:8])}{more}"
    return ""


@contextlib.contextmanager
def _searchable(folder: Path) -> Iterator[None]:
    """Put a folder first on ``sys.path`` for the block, unless it is already there."""
    entry = str(folder)
    present = entry in sys.path or (folder == Path.cwd() and "" in sys.path)
    if not present:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if not present:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


@contextlib.contextmanager
def _no_bytecode() -> Iterator[None]:
    # Importing would otherwise leave __pycache__ folders beside the user's files.
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before
