"""The one opening every image command starts with, as a context manager:
:func:`open_command` checks the engine, starts the clock, guards the output folder (removed
again when the command fails before writing into it) and gives module objects back as they
came; the :class:`Command` it yields loads a model (weights, the random-weights warning,
device and memory format), selects layers and collects the command's warnings."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.command import session
from actviz.command.progress import Reporter, SilentReporter

if TYPE_CHECKING:
    from torch import nn

    from actviz.images import Discovery
    from actviz.models import LoadedModel
    from actviz.models.options import LoadOptions

__all__ = ["Command", "open_command"]


@dataclass
class Command:
    """An image command while it runs: its model (``given``, named ``model``), its reporter,
    its clock, the inputs it found and the warnings it gave.

    Attributes:
        model: How the model is named in messages and files (its name, or its class name).
        given: The model as the caller gave it: a name or an ``nn.Module``.
        notify: The reporter (a :class:`~actviz.command.progress.SilentReporter` by default).
        started: ``time.perf_counter()`` when the command started.
        found: The images among the inputs, when the command takes inputs.
        warnings: Every warning given, in order, as the command's JSON file lists them.
        channels_last: Whether the models run in channels-last memory format.
    """

    model: str
    given: Any
    notify: Reporter
    started: float
    found: Discovery | None = None
    warnings: list[str] = field(default_factory=list)
    channels_last: bool = False

    def warn(self, message: str) -> None:
        """Give a warning that does not stop the command, and list it."""
        self.warnings.append(message)
        self.notify.warn(message)

    def seconds(self) -> float:
        """Seconds since the command started."""
        return time.perf_counter() - self.started

    def load(
        self,
        options: LoadOptions,
        *,
        shows: str,
        given: Any = None,
        weights: str | None = None,
        flag: str = "--weights",
        check: Callable[[LoadedModel], None] | None = None,
    ) -> session.Loaded:
        """Load the model (``given``: another one than the command's, e.g. a diff's model B;
        ``weights`` overrides ``options.weights``), let ``check`` refuse it or warn about it,
        warn loudly once when its weights are random by accident (``shows``: what the
        pictures show, ``"The grids show"``; ``flag``: the option that asks for random
        weights), and put it in the command's memory format (in place)."""
        loaded = session.open_model(
            self.given if given is None else given, options, weights=weights
        )
        if check is not None:
            check(loaded)
        opened = session.warn_if_random(loaded, self.notify, self.warnings, shows=shows, flag=flag)
        session.in_memory_format(loaded.module, self.channels_last)
        return opened

    def select(
        self, loaded: LoadedModel, layers: str | None, *, default: str | None = None
    ) -> tuple[str, list[str]]:
        """The selector (``layers``, else ``default``, else the architecture's default) and
        the modules it names."""
        return session.select(self.model, loaded, layers, default=default)

    def deepest(self, loaded: LoadedModel, layers: str | None) -> tuple[str, list[str]]:
        """:meth:`select`, but without ``layers`` only the deepest layer of the
        architecture's default selection (the last convolution, encoder block or stage)."""
        selector, names = self.select(loaded, layers)
        if layers is not None:
            return selector, names
        return names[-1], names[-1:]


@contextlib.contextmanager
def open_command(
    model: str | nn.Module,
    out: Path,
    *,
    reporter: Reporter | None = None,
    inputs: Sequence[Path | str] | None = None,
    check_inputs: Callable[[Discovery], None] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    hint: str | None = None,
    engine: str = "local",
    channels_last: bool = False,
    guard: Callable[[Path], None] | None = None,
    restore: Sequence[Any] = (),
) -> Iterator[Command]:
    """Open an image command on ``model`` writing into ``out``, for the block.

    In order: the engine is checked against the model (a module object cannot travel to Ray
    workers), the clock starts, ``inputs`` are walked for images and ``check_inputs`` may
    refuse them, then the output folder is prepared (``resume``, ``overwrite``; ``hint``: the
    fix named when it is not empty; ``guard`` replaces that whole step for a command with its
    own rule) and removed again if the block fails before writing into it. ``model`` and
    every module of ``restore`` are given back in their training mode and device.

    Raises:
        UsageError: For a module object with ``engine='ray'``, or what ``check_inputs`` raises.
        OutputError: For an output folder that cannot be used.
    """
    from actviz import output

    session.check_engine(model, engine)
    command = Command(
        model=session.model_label(model),
        given=model,
        notify=reporter or SilentReporter(),
        started=time.perf_counter(),
        channels_last=channels_last,
    )
    if inputs is not None:
        command.found = session.find_inputs(inputs)
        if check_inputs is not None:
            check_inputs(command.found)
    with contextlib.ExitStack() as stack:
        if guard is None:
            stack.enter_context(output.opened(out, resume=resume, overwrite=overwrite, hint=hint))
        else:
            guard(out)
        for given in (model, *restore):
            stack.enter_context(session.restoring(given))
        yield command
