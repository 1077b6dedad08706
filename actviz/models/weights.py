"""What every model source shares about weights: the record of which weights a model carries,
the seed of random weights, and how a ``--weights`` value that names a file is read."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from actviz.errors import UnknownWeightsError, WeightsError

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "RANDOM_SEED",
    "WeightsInfo",
    "existing_checkpoint",
    "looks_like_checkpoint_path",
    "seeded",
]

#: Seed for random initialization (recorded in the manifest).
RANDOM_SEED = 0
#: Extensions of checkpoint files: a spec ending in one is a path, never a weights name.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


@dataclass(frozen=True)
class WeightsInfo:
    """Which weights the model carries, and why.

    Attributes:
        spec: What was asked for (``auto``, ``default``, ``none``, an enum name or a path).
        source: ``pretrained``, ``checkpoint``, ``random``, ``factory`` (the user's own
            model as its factory built it), or ``module`` (a model object as it was given).
        name: The pretrained weights' name (``ResNet34_Weights.IMAGENET1K_V1``) or the
            checkpoint path; None for random weights.
        random: True when the model runs with random initialization.
        reason: Why random weights are used, when ``spec`` did not ask for them.
    """

    spec: str
    source: Literal["pretrained", "checkpoint", "random", "factory", "module"]
    name: str | None = None
    reason: str | None = None

    @property
    def random(self) -> bool:
        """True when the model runs with random initialization."""
        return self.source == "random"


def seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """Build with a fixed seed: random weights are then reproducible, the same command draws
    the same pictures, and --resume continues with the very same network."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_SEED)
        return build()


def looks_like_checkpoint_path(spec: str) -> bool:
    """True when a ``--weights`` value is meant as a file: it has a folder separator or a
    checkpoint extension (``missing.pt`` would otherwise pass for a weights name)."""
    separators = {"/", os.sep, os.altsep or "/"}
    return any(sep in spec for sep in separators) or spec.lower().endswith(CHECKPOINT_SUFFIXES)


def existing_checkpoint(spec: str, name: str, names: str, *, factory: bool = False) -> Path:
    """The checkpoint file a ``--weights`` value names, or an error that says what else works.

    Args:
        spec: The ``--weights`` value.
        name: The model, for the message.
        names: The other values the source takes (``auto, default, none``), for the message.
        factory: The model is the user's own factory (it has no weights names of its own).

    Raises:
        WeightsError: If the file is missing or a folder.
        UnknownWeightsError: If the value is neither a file nor a weights name.
    """
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    names = names.rstrip(", ")
    if path.is_dir():
        raise WeightsError(f"checkpoint {spec} is a folder, not a file; give the file inside it")
    if looks_like_checkpoint_path(spec):
        raise WeightsError(
            f"checkpoint file not found: {spec}; check the path, or use {names} instead of a file"
        )
    if factory:
        raise UnknownWeightsError(
            f"'{spec}' is not an existing checkpoint file; for your own model use auto, none "
            "or a checkpoint path"
        )
    raise UnknownWeightsError(
        f"'{spec}' is neither a weights name of {name} nor an existing file; "
        f"use {names} or a checkpoint path"
    )
