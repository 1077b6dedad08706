"""The option groups every command shares, as frozen dataclasses: how the model is loaded
(:class:`LoadOptions`) and how the work is executed (:class:`ExecutionOptions`);
:func:`from_flat`, which builds a command's options from flat keywords; and
:func:`check_choices`, which every options dataclass calls when built so that a value outside
a ``Literal`` field's choices is refused by name. Each command's own options live in its
family (``actviz.run.options``, ``actviz.top_images.options``, ``actviz.diff.options``).
Importing this module imports no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from actviz.errors import UsageError

# Loading is the models family's business; its options live there and are shared from here.
from actviz.models.options import LoadOptions

__all__ = [
    "Engine",
    "COMMON_GROUPS",
    "ExecutionOptions",
    "KeywordError",
    "LoadOptions",
    "check_choices",
    "from_flat",
    "model_b_weights",
]

_Options = TypeVar("_Options")

Engine = Literal["local", "ray"]


class KeywordError(UsageError, TypeError):
    """A keyword no option has, or keywords given together with an options object: a usage
    error, and a ``TypeError`` as Python's own for an unexpected keyword argument."""


def check_choices(options: object, names: Mapping[str, Any] | None = None) -> None:
    """Refuse a field of the dataclass ``options`` whose value is not one of the choices of
    its ``Literal`` annotation (``norm='global'`` where ``norm: Literal['channel', ...]``).

    Called from each options dataclass's ``__post_init__``. Annotations are read as the
    module of the class writes them; ``names`` adds those it imports only for type checking.

    Raises:
        UsageError: Naming the keyword, the value and the choices.
    """
    for name, choices in _choices_of(type(options), names or {}).items():
        value = getattr(options, name)
        if any(value == c and type(value) is type(c) for c in choices):
            continue
        shown = [repr(c) if isinstance(c, str) else str(c) for c in choices if c is not None]
        listed = ", ".join(shown[:-1]) + f" or {shown[-1]}" if len(shown) > 1 else shown[0]
        none = " (or None)" if None in choices else ""
        raise UsageError(f"{name}={value!r} is not a choice: use {listed}{none}")


#: Per options class: field -> the choices of its Literal annotation.
_CHOICES: dict[type[Any], dict[str, tuple[Any, ...]]] = {}


def _choices_of(cls: type[Any], names: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    known = _CHOICES.get(cls)
    if known is not None:
        return known
    namespace = {**vars(sys.modules[cls.__module__]), **names}
    found: dict[str, tuple[Any, ...]] = {}
    for f in dataclasses.fields(cls):
        annotation: Any = f.type
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - the class's own source
            except NameError:
                continue  # a type that needs an import this check does not make (nn.Module)
        choices = _literal_values(annotation)
        if choices is not None:
            found[f.name] = choices
    _CHOICES[cls] = found
    return found


def _literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The values a ``Literal`` (or a union of them with None) allows; None for any other
    annotation."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return typing.get_args(annotation)
    if origin not in (typing.Union, types.UnionType):
        return None
    values: list[Any] = []
    for arg in typing.get_args(annotation):
        if arg is type(None):
            values.append(None)
            continue
        inner = _literal_values(arg)
        if inner is None:
            return None
        values += inner
    return tuple(values)


@dataclass(frozen=True)
class ExecutionOptions:
    """How the work is carried out; none of it changes what is drawn.

    Attributes:
        batch_size: Images per forward pass.
        workers: DataLoader worker processes for decoding (0: one background thread).
        amp: Autocast the forward pass (bfloat16 on CPU, float16 on CUDA); the maps are drawn
            in float32.
        channels_last: Run the model in channels-last memory format.
        resume: Skip images whose outputs an earlier run with the same settings completed.
        overwrite: Replace an earlier run's outputs in the output folder.
        engine: ``local`` (this process), or ``ray``: the per-image summaries on a pool of
            Ray actors (``workers`` of them; the ``ray`` extra), for ``stats`` and
            ``top-images``.
        ray_address: The Ray cluster to join (``auto``: the one ``ray start`` runs here);
            None starts a local Ray instance.
    """

    batch_size: int = 8
    workers: int = 0
    amp: bool = False
    channels_last: bool = False
    resume: bool = False
    overwrite: bool = False
    engine: Engine = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.workers < 0:
            raise UsageError("--batch-size must be at least 1 and --workers at least 0")
        if self.resume and self.overwrite:
            raise UsageError("--resume and --overwrite contradict each other; choose one")
        check_choices(self)
        if self.ray_address is not None and self.engine != "ray":
            raise UsageError("--ray-address needs --engine ray")

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the manifest."""
        return dataclasses.asdict(self)


COMMON_GROUPS: dict[str, type[Any]] = {"load": LoadOptions, "execution": ExecutionOptions}
"""The groups of :func:`from_flat` every command with a folder of inputs has."""


def model_b_weights(against: Path | None, against_weights: str | None, load: LoadOptions) -> str:
    """Model B's weights, as ``--weights`` takes them, for a command that compares two
    models: the checkpoint ``--against`` names, else ``--against-weights``, else model A's."""
    if against is not None:
        return str(against)
    return against_weights if against_weights is not None else load.weights


def from_flat(
    cls: type[_Options],
    groups: Mapping[str, type[Any]],
    keywords: Mapping[str, Any],
    *,
    caller: str,
    given: _Options | None = None,
    aliases: Mapping[str, str] | None = None,
) -> _Options:
    """Options of a command: ``given`` as they are, or built from flat keywords, each going to
    the group that has a field of its name (``groups``: field of ``cls`` -> its dataclass), or
    to ``cls`` itself. ``aliases`` names fields by the command line's names for them
    (``sort`` for ``order``).

    Raises:
        KeywordError: For keywords with ``given``, one no group has (naming the closest one),
            or a field given by both its names.
    """
    if given is not None:
        if keywords:
            raise KeywordError(
                f"{caller}() takes either an options object or keywords, not both; "
                f"drop {', '.join(sorted(keywords))} or set them on the options"
            )
        return given
    aliases = aliases or {}
    group_of = {f.name: name for name, kind in groups.items() for f in dataclasses.fields(kind)}
    top_fields = {f.name for f in dataclasses.fields(cls)} - set(groups)  # type: ignore[arg-type]
    values: dict[str, dict[str, Any]] = {name: {} for name in groups}
    top: dict[str, Any] = {}
    for given_key, value in keywords.items():
        key = aliases.get(given_key, given_key)
        if key != given_key and key in keywords:
            raise KeywordError(f"{given_key}= and {key}= are the same option; give one")
        if key == "layers" and value is not None and not isinstance(value, str):
            value = ",".join(value)
        if key == "out":
            value = Path(value)
        if key in group_of:
            values[group_of[key]][key] = value
        elif key in top_fields:
            top[key] = value
        else:
            close = difflib.get_close_matches(key, [*group_of, *top_fields, *aliases], n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; help(actviz.{caller}) lists them"
            raise KeywordError(f"{caller}() got an unexpected keyword argument '{key}'{hint}")
    built = {name: groups[name](**group) for name, group in values.items()}
    return cls(**top, **built)
