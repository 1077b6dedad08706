"""A command family's package that is also its function: ``actviz.run(...)``."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["callable_package"]


def callable_package(name: str, function: Callable[..., Any]) -> None:
    """Make the package ``name`` callable as ``function``: importing a package binds its name
    in the parent (``actviz.run``) to the package, so calling the package calls the function."""

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    sys.modules[name].__class__ = CallablePackage
