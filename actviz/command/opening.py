"""The one opening every image command starts with, as a context manager:
:func:`open_command` checks the engine, starts the clock, finds the inputs, guards the output
folder (removed again when the command fails before writing into it) and gives module
objects back as they came, with what a command says of itself once (:class:`CommandSpec`:
its name, its fix for a folder in use, the execution options it always runs with) and the
execution options whole; the :class:`Command` it yields loads a model (weights, random
weights as data with their loud warning, device and memory format), selects layers and
collects the command's warnings."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.head import json_head, model_fields
from actviz.command.options import ExecutionOptions
from actviz.command.progress import Reporter, SilentReporter
from actviz.command.session import model_label, open_model, restoring
from actviz.dictionary import check_fit, load_dictionary
from actviz.errors import UsageError
from actviz.hooks import layer_refs
from actviz.io import images
from actviz.layouts import default_selector
from actviz.output.files import removed_if_empty
from actviz.selectors import MODULE_LISTING, select_layers

if TYPE_CHECKING:
    from torch import nn

    from actviz.dictionary import SparseDictionary
    from actviz.io.images import Discovery
    from actviz.models import LoadedModel
    from actviz.models.options import LoadOptions

__all__ = [
    "Command",
    "CommandSpec",
    "Loaded",
    "RESUMABLE",
    "RandomWeights",
    "input_paths",
    "one_layer",
    "open_command",
    "require_classifier",
]


#: The fix a command that goes on with an earlier run names when its folder is not empty.
RESUMABLE = (
    "add --resume (resume=True in Python) to go on with it, --overwrite (overwrite=True) to "
    "start again, or choose another --out"
)


@dataclass(frozen=True)
class CommandSpec:
    """What an image command says of itself once, for its opening and its batched forward.

    Attributes:
        name: The command (``top-images``), whose model's family may refuse it; empty: none
            does.
        hint: The fix named when the output folder is not empty (None: the kit's own).
        forced: Execution options the command always runs with, whatever it was given
            (``amp=False``: its scores are measured in float32).
        ray: The command can run on a Ray pool (``engine='ray'``), which builds the model
            again in each worker: a module object is refused with it.
    """

    name: str = ""
    hint: str | None = None
    forced: Mapping[str, Any] = field(default_factory=dict)
    ray: bool = False

    def execution(self, given: ExecutionOptions | None) -> ExecutionOptions:
        """``given`` (the defaults when None) with the command's forced options over it."""
        given = given if given is not None else ExecutionOptions()
        return dataclasses.replace(given, **self.forced) if self.forced else given


@dataclass(frozen=True)
class RandomWeights:
    """A model whose weights came out random without being asked for (``--weights none`` asks).

    Attributes:
        model: The model's name.
        reason: Why its weights are random (no network, no pretrained weights, ...).
        flag: The option that asks for random weights on purpose.
    """

    model: str
    reason: str
    flag: str = "--weights"

    def warning(self, shows: str) -> str:
        """The loud warning, saying what ``shows`` (``"The grids show"``) an untrained model."""
        return (
            f"RANDOM WEIGHTS: {self.reason}. {shows} an untrained {self.model}; "
            f"pass {self.flag} none to say that is what you want."
        )


@dataclass(frozen=True)
class Loaded:
    """A model opened for a command, and its random weights as data (None when it has
    trained weights, or random ones were asked for)."""

    model: LoadedModel
    random: RandomWeights | None
    warning: str | None
    """The warning given about ``random``, as it appears among the command's warnings."""


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
        execution: How it runs (the command's forced options over the ones given): the
            models' memory format, and the batched forward's batches, workers and autocast.
    """

    model: str
    given: Any
    notify: Reporter
    started: float
    found: Discovery | None = None
    warnings: list[str] = field(default_factory=list)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)
    name: str = ""
    """The command (``top-images``), for the families that refuse it; empty: none does."""

    def warn(self, message: str) -> None:
        """Give a warning that does not stop the command, and list it."""
        self.warnings.append(message)
        self.notify.warn(message)

    def dictionary(self, path: Path, loaded: LoadedModel, device: Any = "cpu") -> SparseDictionary:
        """``--sae``: the dictionary at ``path`` on ``device``, checked against the loaded
        model (:func:`actviz.dictionary.check_fit`: another named model refused, another name
        or input size warned about).

        Raises:
            UsageError: When it cannot be read, or was trained on another named model.
        """

        sae = load_dictionary(path, device)
        check_fit(
            sae,
            path,
            model=self.model,
            model_source=loaded.source,
            input_size=loaded.input_size,
            warn=self.warn,
        )
        return sae

    def head(self, opened: Loaded) -> dict[str, Any]:
        """The head of a one-model JSON document (:func:`~actviz.command.head.json_head`):
        the model ``opened`` as this command names it, its weights with their warning, and
        its device."""
        loaded = opened.model
        info = loaded.record()
        fields = model_fields(self.model, info, loaded.weights, opened.warning)
        return json_head(infos=[info], device=str(loaded.device), model=fields)

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
    ) -> Loaded:
        """Load the model (``given``: another one than the command's, e.g. a diff's model B;
        ``weights`` overrides ``options.weights``), let ``check`` refuse it or warn about it,
        warn loudly once when its weights are random by accident (``shows``: what the
        pictures show, ``"The grids show"``; ``flag``: the option that asks for random
        weights), and put it in the command's memory format (in place)."""
        loaded = open_model(self.given if given is None else given, options, weights=weights)
        why = loaded.family.refusal(self.name) if self.name else None
        if why is not None:
            raise UsageError(f"{self.name} does not take {loaded.name}: {why}")
        if check is not None:
            check(loaded)
        if self.execution.channels_last:
            import torch

            loaded.module.to(memory_format=torch.channels_last)
        info = loaded.weights
        if not info.random or info.spec.strip().lower() == "none":
            return Loaded(loaded, None, None)
        random = RandomWeights(loaded.name, info.reason or "no pretrained weights", flag)
        self.warn(random.warning(shows))
        return Loaded(loaded, random, self.warnings[-1])

    def select(
        self, loaded: LoadedModel, layers: str | None, *, default: str | None = None
    ) -> tuple[str, list[str]]:
        """The selector (``layers``, else ``default``, else the architecture's default) and
        the modules it names."""

        selector = layers if layers is not None else default or default_selector(loaded.module)
        listing = None if isinstance(self.given, str) else MODULE_LISTING
        refs = layer_refs(loaded.module)
        return selector, select_layers(refs, selector, model=self.model, listing=listing)

    def deepest(self, loaded: LoadedModel, layers: str | None) -> tuple[str, list[str]]:
        """:meth:`select`, but without ``layers`` only the deepest layer of the
        architecture's default selection (the last convolution, encoder block or stage)."""
        selector, names = self.select(loaded, layers)
        if layers is not None:
            return selector, names
        return names[-1], names[-1:]


def one_layer(names: Sequence[str], selector: str | None, *, doing: str, option: str) -> str:
    """The one module a selection names; refused saying what the command does with one
    (``doing``: ``"ablate edits one layer"``) and which ``option`` took ``selector``.

    Raises:
        UsageError: For a selection of several modules.
    """
    if len(names) != 1:
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        raise UsageError(
            f"{doing}; {option} {selector} selects {len(names)} ({shown}): name one of them"
        )
    return str(names[0])


def require_classifier(loaded: LoadedModel, lacking: str) -> None:
    """Refuse a backbone without a classifier, saying what ``lacking`` there is for the
    command (``"there is no class score to attribute"``).

    Raises:
        UsageError: For a model without a classifier.
    """
    if not loaded.classifier:
        raise UsageError(
            f"{loaded.name} is a backbone without a classifier: {lacking}; load a classifier"
        )


def input_paths(inputs: Sequence[Path | str] | Path | str) -> list[Path]:
    """The inputs as paths: one ``str`` or ``Path`` is one input (a file or a folder), not a
    sequence of one-letter names.

    Raises:
        UsageError: For inputs that are neither paths nor a sequence of them.
    """
    if isinstance(inputs, str | Path):
        return [Path(inputs)]
    if isinstance(inputs, Mapping):
        # Iterating a dict gives its keys: {"x": tensor} would be read as a file named x.
        raise UsageError(
            f"inputs must be image files and/or folders (a path, or a list of them), not a "
            f"{type(inputs).__name__} of {', '.join(repr(str(k)) for k in list(inputs)[:3])}; "
            "to look at what a model does with a dict of tensors, use actviz.capture"
        )
    try:
        paths = list(inputs)
    except TypeError:
        raise UsageError(
            f"inputs must be image files and/or folders (a path, or a list of them), not "
            f"{type(inputs).__name__}"
        ) from None
    wrong = next((p for p in paths if not isinstance(p, str | Path)), None)
    if wrong is not None:
        raise UsageError(
            f"inputs must be paths of image files and/or folders, not {type(wrong).__name__}; "
            "to look at a tensor, use actviz.capture"
        )
    return [Path(p) for p in paths]


@contextlib.contextmanager
def open_command(
    model: str | nn.Module,
    out: Path,
    spec: CommandSpec | None = None,
    execution: ExecutionOptions | None = None,
    *,
    reporter: Reporter | None = None,
    inputs: Sequence[Path | str] | Path | str | None = None,
    check_inputs: Callable[[Discovery], None] | None = None,
    guard: Callable[[Path], None] | None = None,
    restore: Sequence[Any] = (),
    discover: Callable[[Sequence[Path]], Discovery] | None = None,
) -> Iterator[Command]:
    """Open the image command ``spec`` on ``model`` writing into ``out``, for the block,
    with the ``execution`` options (the defaults when None) and the command's forced ones.

    In order: the engine is checked against the model (a module object cannot travel to Ray
    workers, for a command that can run on them), the clock starts, ``inputs`` (one path, or
    a sequence of them) are walked for images (folders recursively; none at all is refused)
    and ``check_inputs`` may refuse them, then the output folder is prepared
    (``execution.resume`` and ``overwrite``; the spec's ``hint`` is the fix named when it is
    not empty; ``guard`` replaces that whole step for a command with its own rule) and
    removed again if the block fails before writing into it. ``model`` and every module of
    ``restore`` are given back in their training mode and device. ``discover`` finds the
    inputs instead of the image walk (see :mod:`actviz.command.inputs`). The spec's ``name``
    (``top-images``): the command, whose model's family may refuse it
    (:meth:`actviz.models.families.Family.refusal`).

    Raises:
        UsageError: For a module object with ``engine='ray'``, inputs that hold no image, or
            what ``check_inputs`` raises.
        ImageLoadError: For an input that does not exist.
        OutputError: For an output folder that cannot be used.
    """

    spec = spec if spec is not None else CommandSpec()
    ex = spec.execution(execution)
    if spec.ray and ex.engine == "ray" and not isinstance(model, str):
        raise UsageError(
            "engine='ray' builds the model again in each worker from its name; pass a "
            "model name or 'path/to/file.py:factory' instead of the model object, or use "
            "engine='local'"
        )
    command = Command(
        model=model_label(model),
        given=model,
        notify=reporter or SilentReporter(),
        started=time.perf_counter(),
        execution=ex,
        name=spec.name,
    )
    if inputs is not None:
        paths = input_paths(inputs)
        # ``discover``: inputs that are not images (clips, pairs), found once the model is.
        found = discover(paths) if discover is not None else images.discover(paths)
        command.found = found if discover is not None else found.require(paths)
        if check_inputs is not None:
            check_inputs(command.found)
    with contextlib.ExitStack() as stack:
        if guard is None:
            stack.enter_context(
                output.opened(out, resume=ex.resume, overwrite=ex.overwrite, hint=spec.hint)
            )
        else:
            created = not out.exists()
            guard(out)
            # A folder the guard made is gone again if the command fails before writing.
            stack.enter_context(removed_if_empty(out, created))
        for given in (model, *restore):
            stack.enter_context(restoring(given))
        yield command
