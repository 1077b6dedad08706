"""A command family's package that is also its function: ``actviz.run(...)``."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["callable_package"]


def callable_package(name: str, function: Callable[..., Any]) -> None:
    """Make the package ``name`` callable as ``function``: importing a package binds its name
    in the parent (``actviz.run``) to the package, so calling the package calls the function.
    The package wraps the function (``__wrapped__``), so ``inspect.signature`` and ``help``
    in a notebook show the function's parameters and its result's type, not ``Any``."""

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    package = sys.modules[name]
    package.__class__ = CallablePackage
    package.__wrapped__ = function  # type: ignore[attr-defined]
