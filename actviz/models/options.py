"""How a command loads its model: the options every command shares for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from actviz.models.preprocessing import Preprocessing

__all__ = ["LoadOptions"]


@dataclass(frozen=True)
class LoadOptions:
    """How the model is built and where it runs.

    Attributes:
        weights: ``auto``, ``default``, ``none``, an enum name, or a checkpoint path.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        trust_checkpoint: Allow a checkpoint that needs full unpickling (runs its code).
        input_size: ``(height, width)`` of the model input, for models that do not take
            224 x 224.
        in_chans: 3 (RGB) or 1 (greyscale) input channels.
        preprocess: The input transform (:class:`~actviz.models.Preprocessing`) instead of
            the model's own; the Python API's way to feed a model object as it was trained.
    """

    weights: str = "auto"
    device: str = "auto"
    trust_checkpoint: bool = False
    input_size: tuple[int, int] | None = None
    in_chans: int = 3
    preprocess: Preprocessing | None = None
