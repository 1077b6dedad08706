"""The options of ``actviz tcav``, as one frozen dataclass built once and checked when built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError

__all__ = ["Cav", "TcavOptions", "named_folders"]

Cav = Literal["fast", "linear"]


def named_folders(
    given: Any, flag: str, *, optional: bool = False
) -> tuple[tuple[str, Path | None], ...]:
    """``NAME=DIR`` items (a mapping, or strings) as ``(name, folder)`` pairs; with
    ``optional``, a bare ``NAME`` has no folder.

    Raises:
        UsageError: For an item without a name or (unless optional) without a folder, or a
            name given twice.
    """
    items: Iterable[Any]
    if isinstance(given, Mapping):
        items = [(str(k), v) for k, v in given.items()]
    elif isinstance(given, str | Path):
        items = [given]
    else:
        items = list(given or ())
    out: list[tuple[str, Path | None]] = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            name, folder = str(item[0]).strip(), item[1]
        else:
            name, sep, rest = str(item).partition("=")
            name, folder = name.strip(), (rest.strip() if sep else None)
        if not name or (folder in (None, "") and not optional):
            raise UsageError(
                f"{flag} takes NAME=DIR (e.g. {flag} striped=concepts/striped), not {item!r}"
            )
        out.append((name, Path(folder) if folder not in (None, "") else None))
    names = [name for name, _ in out]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise UsageError(f"{flag} names {twice!r} twice; give each name once")
    return tuple(out)


@dataclass(frozen=True)
class TcavOptions:
    """Everything ``actviz tcav`` takes besides the model and the inputs.

    Attributes:
        layers: The one layer the concept vectors live in; None: the deepest layer of the
            architecture's default selection.
        concepts: ``(name, folder)`` of each concept's images (``NAME=DIR`` on the command
            line, or a mapping).
        random: Folders of random images: each run's negatives, and the random-vs-random
            vectors the concepts are tested against.
        targets: ``(class, folder or None)``: each class (an index or a name of the model's)
            and, optionally, its own images (``CLASS=DIR``); without one, the inputs.
        cav: ``fast`` (FastCAV: the concept's mean minus the mean of all, in closed form) or
            ``linear`` (a linear SVM by stochastic gradient descent, as TCAV and captum train
            it; needs scikit-learn).
        runs: Concept vectors per concept, each against another random draw (and as many
            random-vs-random ones).
        per_run: Images of each set a run draws (0: as many as the concept has, at most half
            the random images).
        seed: Seed of the draws (and of the linear classifier and the test's permutations).
        alpha: The false-discovery rate of the test (Benjamini-Hochberg over concepts and
            targets).
        out: Output folder: ``tcav.json``, ``tcav.html``, ``tcav.png``, ``cavs/``.
        report: Write the page and the chart.
        load: How the model is built.
        execution: Batch size, decoding workers, resume and overwrite.
    """

    layers: str | None = None
    concepts: tuple[tuple[str, Path | None], ...] = ()
    random: tuple[Path, ...] = ()
    targets: tuple[tuple[str, Path | None], ...] = ()
    cav: Cav = "fast"
    runs: int = 20
    per_run: int = 0
    seed: int = 0
    alpha: float = 0.05
    out: Path = Path("actviz-tcav")
    report: bool = True
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "concepts", named_folders(self.concepts, "--concept"))
        object.__setattr__(self, "targets", named_folders(self.targets, "--target", optional=True))
        given = [self.random] if isinstance(self.random, str | Path) else list(self.random)
        object.__setattr__(self, "random", tuple(Path(p) for p in given))
        object.__setattr__(self, "out", Path(self.out))
        check_choices(self)
        if not self.concepts:
            raise UsageError("tcav needs a concept: --concept NAME=DIR (a folder of its images)")
        if not self.random:
            raise UsageError(
                "tcav needs random images to test the concepts against: --random DIR (a folder "
                "of images with no particular concept, at least twice the concept's)"
            )
        if not self.targets:
            raise UsageError("tcav needs a class: --target CLASS (an index or a class name)")
        if self.runs < 2:
            raise UsageError(f"--runs must be at least 2 (the test compares runs), not {self.runs}")
        if self.per_run < 0:
            raise UsageError(f"--per-run must be at least 0, not {self.per_run}")
        if not 0 < self.alpha < 1:
            raise UsageError(f"--alpha must be between 0 and 1, not {self.alpha}")
        if self.execution.engine != "local":
            raise UsageError("tcav runs on the local engine; drop --engine ray")
