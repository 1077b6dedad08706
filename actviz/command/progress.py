"""The one progress protocol every command reports through: warnings, a total, and one
``advance`` per finished unit (an image for ``run``, ``top-images`` and ``diff``, a step for
``optimize``). The CLI supplies the implementation that draws a bar; the library's default,
:class:`SilentReporter`, ignores everything."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from actviz.models.families import inputs_of

__all__ = ["Reporter", "SilentReporter", "input_units", "start_progress"]


def input_units(family: str | None) -> tuple[str, str, str]:
    """``image``, ``images``, ``non-image``; a video model's clips, a flow model's pairs: as
    the row of the family called ``family`` (a record's key) names its inputs."""

    inputs = inputs_of(family)
    return inputs.unit, inputs.units, inputs.skipped


class Reporter(Protocol):
    """Receives what a command wants a person to know while it works. Every method is
    optional in spirit: :class:`SilentReporter` ignores everything."""

    def warn(self, message: str) -> None:
        """A problem that does not stop the command (random weights, a layer that never ran)."""

    def start(self, total: int) -> None:
        """The command is about to process ``total`` units (images, or optimization steps)."""

    def advance(self, result: Any) -> None:
        """One unit is done (or failed): the image's result, or None for a step."""


class SilentReporter:
    """A reporter that ignores everything: the default for library use."""

    def warn(self, message: str) -> None:
        """Ignore."""

    def start(self, total: int) -> None:
        """Ignore."""

    def advance(self, result: Any) -> None:
        """Ignore."""


def start_progress(
    notify: Reporter, total: int, done: Iterable[Any] = (), *, unit: str = "images"
) -> None:
    """Tell ``notify`` how many units there are, then advance it past the ones an earlier run
    did (``done``), so a resumed command's bar starts where the last one stopped. A reporter
    with a ``name_unit`` method is told what the units are first (``clips``, ``pairs``), and
    one with a ``begin`` method how many of them an earlier run did (its pace counts only the
    units done now): optional methods, so that reporters written before them keep working."""
    name_unit = getattr(notify, "name_unit", None)
    if callable(name_unit):
        name_unit(unit)
    notify.start(total)
    reused = list(done)
    begin = getattr(notify, "begin", None)
    if callable(begin):
        begin(len(reused))
    for result in reused:
        notify.advance(result)
