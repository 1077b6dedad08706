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
- Arguments for the factory may follow it as a call of literals:
  ``nets/tiny.py:build(width=32)``, ``pkg.models:build(3, depth=2)``. They are parsed with
  :mod:`ast` and :func:`ast.literal_eval`, never evaluated: numbers, strings, bytes, booleans,
  None, and tuples, lists, dicts and sets of those (:mod:`actviz.models.factory_spec`).

Nothing is written: bytecode caches are not created next to the user's files.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError, first_line
from actviz.models.factory_spec import (
    FactorySpec,
    is_factory_spec,
    parse_factory_spec,
)

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "FactorySpec",
    "build_user_model",
    "factory_module_importable",
    "is_factory_spec",
    "load_factory",
    "parse_factory_spec",
]

#: A dotted module path, as ``import`` takes it (``pkg.models``).
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """Import the factory a spec names, without calling it.

    This imports the user's module or file, which runs its top-level code.

    Args:
        spec: ``package.module:factory`` or ``path/to/file.py:factory``; ``factory`` may be
            a dotted path (``Net.build``) and may carry literal arguments
            (``build(3, width=32)``).

    Returns:
        A callable that takes further keyword arguments for the factory, calls it with the
        spec's arguments and those, and returns the checked ``nn.Module``.

    Raises:
        UsageError: If the spec is malformed, the file does not exist, the attribute is
            missing (close names are suggested) or not callable, or the spec's arguments do
            not fit the factory's signature.
        ModelError: If the module cannot be imported.
    """
    parsed = parse_factory_spec(spec)
    target, attribute = parsed.target, parsed.attribute
    module, folder = _import_target(target)
    factory = _resolve_attribute(module, attribute, target)

    from torch import nn

    if isinstance(factory, nn.Module):
        # A ready-made instance: calling it would run its forward, so hand it back as is.
        instance = factory

        def given(**kwargs: Any) -> nn.Module:
            if kwargs or parsed.args or parsed.kwargs:
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
    _check_arguments(factory, parsed, spec)

    def build(**kwargs: Any) -> nn.Module:
        # Searchable again while the factory runs, for imports it makes lazily.
        try:
            with _searchable(folder), _no_bytecode():
                made = factory(*parsed.args, **{**parsed.kwargs, **kwargs})
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


def _check_arguments(factory: Callable[..., Any], parsed: FactorySpec, spec: str) -> None:
    """A usage error, before anything runs, when the spec's arguments cannot bind."""
    if not parsed.args and not parsed.kwargs:
        return
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: let the call itself decide
        return
    try:
        signature.bind(*parsed.args, **parsed.kwargs)
    except TypeError as exc:
        raise UsageError(
            f"{parsed.target}:{parsed.attribute} cannot take the arguments in '{spec}' "
            f"({exc}); its signature is {parsed.attribute}{signature}"
        ) from None


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


def _file_module_name(resolved: Path) -> str:
    """The private module name a file is loaded under: unique per path."""
    digest = hashlib.sha1(
        str(resolved).encode("utf-8", "surrogateescape"), usedforsecurity=False
    ).hexdigest()[:12]
    stem = re.sub(r"\W", "_", resolved.stem)
    return f"actviz_user_{stem}_{digest}"


@contextlib.contextmanager
def factory_module_importable(model: str) -> Iterator[None]:
    """Make the factory's file importable under its plain name for the block.

    A model pickled in full (``torch.save(model)``) names its classes by the module they were
    defined in, as the user imported it: ``mynet.Net``. actviz loads ``mynet.py`` under a
    private name, so unpickling would fail with ``No module named 'mynet'``. Inside the block,
    the already-loaded module is also registered as ``mynet`` (unless a different ``mynet``
    is imported already: that one is left alone) and its folder is searchable, for the
    sibling modules a pickle may name. Both are undone afterwards. For
    ``package.module:factory`` the module is imported under its own name already: nothing
    to do. Call after :func:`load_factory` (it is what loads the file).
    """
    try:
        target = parse_factory_spec(model).target
    except UsageError:
        target = ""
    if not target or not _looks_like_path(target):
        yield
        return
    resolved = Path(target).expanduser().resolve()
    module = sys.modules.get(_file_module_name(resolved))
    plain = resolved.stem
    alias = (
        module is not None
        and plain.isidentifier()
        and plain not in sys.modules
        and plain not in sys.stdlib_module_names
    )
    if alias:
        sys.modules[plain] = module  # type: ignore[assignment]
    try:
        with _searchable(resolved.parent), _no_bytecode():
            yield
    finally:
        if alias and sys.modules.get(plain) is module:
            del sys.modules[plain]


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        what = "is a folder, not a .py file" if path.is_dir() else "does not exist"
        raise UsageError(f"model file {path} {what}; check the path before the ':'")
    resolved = path.resolve()
    name = _file_module_name(resolved)
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
