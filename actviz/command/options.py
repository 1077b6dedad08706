"""The option groups every command shares, as frozen dataclasses: how the model is loaded
(:class:`LoadOptions`) and how the work is executed (:class:`ExecutionOptions`), and
:func:`from_flat`, which builds a command's options from flat keywords. Each command's own
options live in its family (``actviz.run.options``, ``actviz.examples.options``,
``actviz.diff.options``). Importing this module imports no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
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
    "LoadOptions",
    "from_flat",
]

_Options = TypeVar("_Options")

Engine = Literal["local", "ray"]


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
        if self.engine not in ("local", "ray"):
            raise UsageError(f"unknown --engine '{self.engine}'; use local or ray")
        if self.ray_address is not None and self.engine != "ray":
            raise UsageError("--ray-address needs --engine ray")

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the manifest."""
        return dataclasses.asdict(self)


COMMON_GROUPS: dict[str, type[Any]] = {"load": LoadOptions, "execution": ExecutionOptions}
"""The groups of :func:`from_flat` every command with a folder of inputs has."""


def from_flat(
    cls: type[_Options],
    groups: Mapping[str, type[Any]],
    keywords: Mapping[str, Any],
    *,
    caller: str,
    given: _Options | None = None,
) -> _Options:
    """Options of a command: ``given`` as they are, or built from flat keywords, each going to
    the group that has a field of its name (``groups``: field of ``cls`` -> its dataclass), or
    to ``cls`` itself.

    Raises:
        TypeError: For keywords with ``given``, or one no group has (naming the closest one).
    """
    if given is not None:
        if keywords:
            raise TypeError("pass either options or keywords, not both")
        return given
    group_of = {f.name: name for name, kind in groups.items() for f in dataclasses.fields(kind)}
    top_fields = {f.name for f in dataclasses.fields(cls)} - set(groups)  # type: ignore[arg-type]
    values: dict[str, dict[str, Any]] = {name: {} for name in groups}
    top: dict[str, Any] = {}
    for key, value in keywords.items():
        if key == "layers" and value is not None and not isinstance(value, str):
            value = ",".join(value)
        if key == "out":
            value = Path(value)
        if key in group_of:
            values[group_of[key]][key] = value
        elif key in top_fields:
            top[key] = value
        else:
            close = difflib.get_close_matches(key, [*group_of, *top_fields], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument '{key}'{hint}")
    built = {name: groups[name](**group) for name, group in values.items()}
    return cls(**top, **built)
