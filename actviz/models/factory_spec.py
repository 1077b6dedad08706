"""A factory spec read without importing anything: ``TARGET:FACTORY`` or
``TARGET:FACTORY(ARGS)``, ARGS Python literals parsed with :mod:`ast` and
:func:`ast.literal_eval`, never evaluated."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from actviz.errors import UsageError

__all__ = ["FactorySpec", "is_factory_spec", "parse_factory_spec"]

_ATTRIBUTE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: ``TARGET:FACTORY(ARGS)``: the target is as long as it can be, so the split is at the last
#: ``:`` before the factory name (a Windows drive's colon stays in the target, a colon inside
#: the arguments stays in them).
_SPEC_WITH_CALL = re.compile(
    r"(?P<target>.*):(?P<attribute>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*(?P<call>\(.*\))",
    re.DOTALL,
)


@dataclass(frozen=True)
class FactorySpec:
    """A parsed ``TARGET:FACTORY`` or ``TARGET:FACTORY(ARGS)``.

    Attributes:
        target: The module path (``pkg.models``) or file (``nets/tiny.py``).
        attribute: The factory's (dotted) name inside it.
        args: Positional literal arguments from the spec.
        kwargs: Keyword literal arguments from the spec.
    """

    target: str
    attribute: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def is_factory_spec(model: str) -> bool:
    """True when MODEL names the user's factory rather than a torchvision model.

    torchvision names never contain ``:`` nor end in ``.py``, so either marks a factory:
    ``pkg.models:build``, ``nets/tiny.py:Tiny``, ``nets/tiny.py`` (factory missing: an error
    that says so).
    """
    text = model.strip()
    return ":" in text or text.endswith(".py")


def parse_factory_spec(spec: str) -> FactorySpec:
    """Parse ``TARGET:FACTORY`` or ``TARGET:FACTORY(ARGS)`` without importing anything.

    ARGS are Python literals only (``3``, ``"wide"``, ``(1, 2)``, ``width=32``), read with
    :func:`ast.literal_eval`; nothing is evaluated.

    Raises:
        UsageError: If the factory part is missing or not a dotted Python name, or an
            argument is not a literal (the message names it).

    Example:
        >>> parse_factory_spec("nets/tiny.py:build(3, depth=2)")
        FactorySpec(target='nets/tiny.py', attribute='build', args=(3,), kwargs={'depth': 2})
    """
    text = spec.strip()
    called = _SPEC_WITH_CALL.fullmatch(text)
    if called is not None and called.group("target").strip():
        args, kwargs = _literal_arguments(called.group("call"), spec)
        return FactorySpec(called.group("target").strip(), called.group("attribute"), args, kwargs)
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
            "function or class name after the colon (dots allowed: Net.build), optionally "
            "with literal arguments: build(width=32)"
        )
    return FactorySpec(target, attribute)


def _literal_arguments(call: str, spec: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The literal arguments of ``(ARGS)``; a usage error names any that is not a literal."""
    source = f"f{call}"
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise UsageError(
            f"cannot read the arguments {call} in '{spec}'; write literals separated by "
            "commas, e.g. build(3, width=32)"
        ) from None
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise UsageError(
            f"cannot read the arguments {call} in '{spec}'; write one call of literals, "
            "e.g. build(3, width=32)"
        )

    def literal(value: ast.expr, name: str | None = None) -> Any:
        shown = _one_line(ast.get_source_segment(source, value) or ast.unparse(value))
        if name is not None:
            shown = f"{name}={shown}"
        if isinstance(value, ast.Starred):
            raise UsageError(
                f"argument {shown} in '{spec}' unpacks a value; write each argument as a literal"
            )
        try:
            return ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise UsageError(
                f"argument {shown} in '{spec}' is not a literal; factory arguments may only "
                "be numbers, strings, booleans, None, and tuples, lists, dicts or sets of "
                "those (nothing is evaluated)"
            ) from None

    args = tuple(literal(arg) for arg in node.args)
    kwargs: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise UsageError(
                f"argument **{_one_line(ast.unparse(keyword.value))} in '{spec}' unpacks a "
                "mapping; write each keyword argument as name=literal"
            )
        kwargs[keyword.arg] = literal(keyword.value, keyword.arg)
    return args, kwargs


def _one_line(text: str) -> str:
    return " ".join(text.split())
