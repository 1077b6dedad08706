"""Option groups: a set of options declared once, as a dataclass, and used by one or several
commands.

A command takes a group as one keyword-only parameter (``load: LoadFlags``); :func:`grouped`
spreads the dataclass's fields into the signature Typer reads, so each field is an option of
the command with its declaration, default and help from the dataclass, and hands the command
one instance. The group builds its library options object (``load.options()``), so no command
rebuilds it by hand. A command that takes only part of a group, or one field with other help,
says so with :class:`Group` in ``Annotated``.

A command's own options are a group too (:class:`OptionsFlags`): its fields are named as the
fields of the command's options dataclass, and :meth:`Flags.build` fills the dataclass by name,
so no field is copied from the one to the other.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from actviz.cli.options import (
    AmpOption,
    BatchSizeOption,
    ChannelsLastOption,
    DeviceOption,
    EngineOption,
    FailOnOption,
    InChansOption,
    InputSizeOption,
    OverwriteOption,
    RayAddressOption,
    ResumeOption,
    ThresholdOption,
    TrustCheckpointOption,
    WeightsOption,
    WorkersOption,
)
from actviz.errors import UsageError

if TYPE_CHECKING:
    from actviz.command.options import ExecutionOptions, LoadOptions
    from actviz.statistics import Thresholds

__all__ = [
    "CheckFlags",
    "ExecutionFlags",
    "Flags",
    "Group",
    "LoadFlags",
    "OptionsFlags",
    "grouped",
    "pair",
    "selector",
]

R = TypeVar("R")
T = TypeVar("T")


@runtime_checkable
class _Built(Protocol):
    """A group that builds its library options with no argument (``load.options()``)."""

    def options(self) -> Any: ...


class Flags:
    """Base of the option groups: a dataclass whose fields are ``Annotated`` Typer options.

    A field is named as the library's options name it, with two spellings of the command
    line's own: ``layers`` (the repeatable ``--layers``) is one selector, and a ``no_X``
    switch (``--no-report``) is ``X`` negated. ``read_by_command`` lists the fields the
    library's options do not have, which the command reads itself. A field without a default
    is an option the command line requires (the dataclass is then ``kw_only``).
    """

    read_by_command: ClassVar[tuple[str, ...]] = ()
    #: Field -> the parameter (or group) of the command it is listed after in ``--help``,
    #: where it is not listed with the rest of its group; the fields declared after it, up to
    #: the next one placed, follow it there.
    placed: ClassVar[Mapping[str, str]] = {}
    #: Field -> the options' name for it, where the command line says it otherwise
    #: (``--concept`` fills ``concepts``).
    renamed: ClassVar[Mapping[str, str]] = {}
    #: A field of the options that is a dataclass of its own -> the fields that fill it (by
    #: their names after ``renamed``, applied within it); one of them is given to the options
    #: too when they have a field of its own name (cam-eval's ``--seed``).
    nested: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: Fields whose None or empty list (not given) leaves the options' own default
    #: (``--methods``).
    defaulted: ClassVar[tuple[str, ...]] = ()

    def values(self, cls: type[Any] | None = None) -> dict[str, Any]:
        """The fields as the library's options (``cls``) name them (see the class), each
        nested dataclass as a dict of its fields."""
        top = {f.name for f in dataclasses.fields(cls)} if cls is not None else set()
        homes = {name: outer for outer, names in self.nested.items() for name in names}
        values: dict[str, Any] = {outer: {} for outer in self.nested}
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            name, value = item.name, getattr(self, item.name)
            if name in self.read_by_command or (name in self.defaulted and not value):
                continue
            if name == "layers":
                value = selector(value)
            elif name.startswith("no_"):
                name, value = name[3:], not value
            home = homes.get(item.name)
            if home is not None:
                values[home][self.renamed.get(item.name, name)] = value
                if name not in top:
                    continue
            values[name if home is not None else self.renamed.get(item.name, name)] = value
        return values

    def build(self, cls: type[T], /, **given: Any) -> T:
        """``cls`` made of every field by name (:meth:`values`) and ``given`` over them; a
        group given (``load=load``) is given as its library options (its ``options()``); a
        nested dataclass is made by its field's default factory (its class)."""
        values = self.values(cls)
        factories = {f.name: f.default_factory for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for outer in self.nested:
            values[outer] = factories[outer](**values[outer])  # type: ignore[operator]
        built = {k: v.options() if isinstance(v, _Built) else v for k, v in given.items()}
        return cls(**{**values, **built})


class OptionsFlags(Flags):
    """A command's own options as a group: each field is a field of the command's options
    dataclass (or its ``no_X`` switch), with the command line's declaration, and the command
    builds the dataclass with :meth:`Flags.build`. A test holds the defaults equal to the
    dataclass's."""


@dataclass(frozen=True)
class Group:
    """How a command takes a group, in ``Annotated[SomeFlags, Group(...)]``.

    Attributes:
        without: Fields the command does not offer; they keep the dataclass's default.
        replace: Field -> the ``Annotated`` option declaration the command uses instead (other
            help, same name and default).
    """

    without: tuple[str, ...] = ()
    replace: Mapping[str, Any] = field(default_factory=dict)


def _group_of(hint: Any) -> tuple[type[Flags], Group] | None:
    """The group class and how it is taken, when ``hint`` names a group; else None."""
    marker = Group()
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        marker = next((e for e in extras if isinstance(e, Group)), marker)
    if isinstance(hint, type) and issubclass(hint, Flags):
        return hint, marker
    return None


def grouped(command: Callable[..., R]) -> Callable[..., R]:
    """Spread the command's group parameters into one option per field, for Typer.

    Every parameter of the signature Typer sees is keyword-only (Typer passes them by name);
    the groups keep their place, so ``--help`` lists the options in the order written.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    spread: dict[str, tuple[type[Flags], list[str]]] = {}
    for param in inspect.signature(command).parameters.values():
        found = _group_of(hints[param.name])
        if found is None:
            parameters.append(
                param.replace(annotation=hints[param.name], kind=inspect.Parameter.KEYWORD_ONLY)
            )
            continue
        kind, marker = found
        field_hints = typing.get_type_hints(kind, include_extras=True)
        names = []
        for item in dataclasses.fields(kind):  # type: ignore[arg-type]
            if item.name in marker.without:
                continue
            annotation = marker.replace.get(item.name, field_hints[item.name])
            parameters.append(
                inspect.Parameter(
                    item.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=(
                        inspect.Parameter.empty
                        if item.default is dataclasses.MISSING
                        else item.default
                    ),
                    annotation=annotation,
                )
            )
            names.append(item.name)
        spread[param.name] = (kind, names)

    parameters = _placed(parameters, spread)

    @functools.wraps(command)
    def wrapper(**values: Any) -> R:
        for name, (kind, names) in spread.items():
            values[name] = kind(**{n: values.pop(n) for n in names})
        return command(**values)

    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


def _placed(
    parameters: list[inspect.Parameter], spread: Mapping[str, tuple[type[Flags], list[str]]]
) -> list[inspect.Parameter]:
    """The parameters with each group's ``placed`` fields (each with the fields after it, up
    to the next one placed) moved after the parameter or group they name, so that ``--help``
    keeps its order."""
    ends = {name: names[-1] for name, (_, names) in spread.items() if names}
    runs: list[tuple[str, list[str]]] = []
    for kind, names in spread.values():
        placing = False
        for name in names:
            if name in kind.placed:
                runs.append((ends.get(kind.placed[name], kind.placed[name]), [name]))
                placing = True
            elif placing:
                runs[-1][1].append(name)
    for after, run in runs:
        moved = [p for p in parameters if p.name in run]
        for item in moved:
            parameters.remove(item)
        at = next(i for i, p in enumerate(parameters) if p.name == after)
        parameters[at + 1 : at + 1] = moved
    return parameters


def pair(text: str, option: str, kind: type[float] | type[int]) -> tuple[Any, Any]:
    """Parse ``A,B`` (or ``AxB``) into two numbers, or fail with the option's name."""
    parts = text.replace("x", ",").split(",")
    try:
        first, second = (kind(p.strip()) for p in parts)
    except ValueError:
        raise UsageError(f"{option} takes two numbers like 1,99 or 224,320; got '{text}'") from None
    return first, second


def selector(layers: list[str] | None) -> str | None:
    """The ``--layers`` options as one selector, or None for the architecture's default."""
    return ",".join(layers) if layers else None


@dataclass(frozen=True)
class LoadFlags(Flags):
    """How the model is loaded: ``--weights``, ``--device`` and what its input is."""

    weights: WeightsOption = "auto"
    device: DeviceOption = "auto"
    trust_checkpoint: TrustCheckpointOption = False
    input_size: InputSizeOption = None
    in_chans: InChansOption = 3

    def size(self) -> tuple[int, int] | None:
        """``--input-size`` as (height, width), or None."""
        return pair(self.input_size, "--input-size", int) if self.input_size else None

    def options(self) -> LoadOptions:
        """The library's load options."""
        from actviz.command.options import LoadOptions

        return self.build(LoadOptions, input_size=self.size())


@dataclass(frozen=True)
class ExecutionFlags(Flags):
    """How the work runs: batches, workers, engine, precision, resume and overwrite."""

    batch_size: BatchSizeOption = 8
    workers: WorkersOption = 0
    engine: EngineOption = "local"
    ray_address: RayAddressOption = None
    amp: AmpOption = False
    channels_last: ChannelsLastOption = False
    resume: ResumeOption = False
    overwrite: OverwriteOption = False

    def options(self) -> ExecutionOptions:
        """The library's execution options (the same fields)."""
        from actviz.command.options import ExecutionOptions

        return self.build(ExecutionOptions)


@dataclass(frozen=True)
class CheckFlags(Flags):
    """The anomaly checks of ``run`` and ``stats``: ``--fail-on`` and ``--threshold``."""

    fail_on: FailOnOption = None
    threshold: ThresholdOption = None

    def kinds(self) -> frozenset[str]:
        """The flag kinds ``--fail-on`` names (a bad kind fails here, before any work)."""
        from actviz.statistics import parse_kinds

        return parse_kinds(self.fail_on) if self.fail_on else frozenset()

    def thresholds(self) -> Thresholds | None:
        """``--threshold name=value`` options -> ``Thresholds``, or None for the defaults."""
        if not self.threshold:
            return None
        from actviz.statistics import Thresholds

        # The numbers; readouts are the family's to say.
        known = {f.name for f in dataclasses.fields(Thresholds) if f.type in ("float", float)}
        values: dict[str, Any] = {}
        for item in self.threshold:
            name, _, text = item.partition("=")
            name = name.strip()
            if name not in known:
                raise UsageError(
                    f"--threshold: unknown name '{name}'; use one of {', '.join(sorted(known))}"
                )
            try:
                values[name] = float(text)
            except ValueError:
                raise UsageError(f"--threshold {name} needs a number, e.g. {name}=0.8") from None
        return dataclasses.replace(Thresholds(), **values)
