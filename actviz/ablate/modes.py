"""How a coordinate is knocked out, as rows: ``zero``, ``mean``, ``resample``, ``scale:A`` and
``steer:A``, each registered once with its name, whether it takes an amount, what it needs from
the folder, and the function that gives the coordinate's new values.

A coordinate is what ablate removes: a unit (a channel at every position), the component along
a direction, or a dictionary feature's code (:mod:`actviz.ablate.targets`). Every mode maps the
coordinate's values ``v`` (``(B, J, *positions)``) to new ones; what is not a coordinate is
left as it was. The literature shows the mode changes conclusions (zero, mean and resample
ablation rank units differently), so the mode is recorded with every result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["MODES", "Mode", "ModeRow", "parse_mode"]

Needs = Literal["mean", "donor"] | None


def _zero(v: torch.Tensor, ref: torch.Tensor | None, amount: float) -> torch.Tensor:
    import torch

    return torch.zeros_like(v)


def _reference(v: torch.Tensor, ref: torch.Tensor | None, amount: float) -> torch.Tensor:
    # mean: (J, *positions), broadcast over the batch; resample: the donors' (B, J, ...).
    assert ref is not None
    return ref.to(v.dtype).expand_as(v)


def _scale(v: torch.Tensor, ref: torch.Tensor | None, amount: float) -> torch.Tensor:
    return v * amount


def _steer(v: torch.Tensor, ref: torch.Tensor | None, amount: float) -> torch.Tensor:
    return v + amount


@dataclass(frozen=True)
class ModeRow:
    """One way of knocking a coordinate out.

    Attributes:
        name: How ``--mode`` names it.
        amount: Whether it takes ``:A`` (``scale:0.5``, ``steer:3``).
        needs: ``mean``: a pass over the folder for each coordinate's mean (per position);
            ``donor``: each image's donor image's values (another image of the folder, seeded);
            None: nothing.
        values: ``(v, reference, amount)`` -> the coordinate's new values.
        says: What it does, in words (the JSON's protocol and the docs).
    """

    name: str
    amount: bool
    needs: Needs
    values: Callable[[torch.Tensor, torch.Tensor | None, float], torch.Tensor]
    says: str


MODES: dict[str, ModeRow] = {
    row.name: row
    for row in (
        ModeRow("zero", False, None, _zero, "set to 0"),
        ModeRow(
            "mean",
            False,
            "mean",
            _reference,
            "set to its mean over the folder's images, position by position",
        ),
        ModeRow(
            "resample",
            False,
            "donor",
            _reference,
            "set to its value in another image of the folder (each image's donor drawn "
            "from the seed)",
        ),
        ModeRow("scale", True, None, _scale, "multiplied by A"),
        ModeRow("steer", True, None, _steer, "A added (A times the direction)"),
    )
}
"""Every mode, by name."""


@dataclass(frozen=True)
class Mode:
    """A mode with its amount: what ``--mode`` said."""

    row: ModeRow
    amount: float = 0.0

    @property
    def spec(self) -> str:
        """``zero``, ``scale:0.5``: as ``--mode`` takes it back."""
        return f"{self.row.name}:{self.amount:g}" if self.row.amount else self.row.name

    @property
    def needs(self) -> Needs:
        return self.row.needs

    def values(self, v: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
        """The new values of coordinates whose values are ``v``."""
        return self.row.values(v, reference, self.amount)

    def describe(self) -> dict[str, object]:
        """The mode as the JSON records it."""
        says = self.row.says.replace("A", f"{self.amount:g}") if self.row.amount else self.row.says
        return {
            "name": self.row.name,
            "amount": self.amount if self.row.amount else None,
            "spec": self.spec,
            "says": says,
        }


def parse_mode(text: str) -> Mode:
    """``zero``, ``mean``, ``resample``, ``scale:A`` or ``steer:A``.

    Raises:
        UsageError: For another name, a missing or extra amount, or one that is not a number.
    """
    name, sep, rest = text.strip().lower().partition(":")
    row = MODES.get(name)
    choices = "zero, mean, resample, scale:A or steer:A"
    if row is None:
        raise UsageError(f"--mode takes {choices}, not '{text}'")
    if not row.amount:
        if sep:
            raise UsageError(f"--mode {name} takes no amount; drop ':{rest}'")
        return Mode(row)
    try:
        amount = float(rest)
    except ValueError:
        raise UsageError(
            f"--mode {name} needs a number after the colon, e.g. {name}:0.5; got '{text}'"
        ) from None
    if not math.isfinite(amount):
        raise UsageError(f"--mode {name}:{rest}: the amount must be a finite number")
    return Mode(row, amount)
