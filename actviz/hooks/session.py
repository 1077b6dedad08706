"""The hook core every recorder builds on (activations, gradients, the training monitor):
:class:`HookSession` and the capture records."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from actviz.errors import ModelError
from actviz.hooks.refs import check_hookable
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = ["Capture", "HookSession", "Skipped", "call_key", "eval_mode"]

_Session = TypeVar("_Session", bound="HookSession")


@dataclass
class Capture:
    """One captured output of one call of one module.

    Attributes:
        key: Unique name of the capture: the module name, ``:N`` for its N-th call (N >= 2),
            and ``[i]``/``[key]`` for an element of a tuple or dict output.
        module: The module's qualified name.
        module_type: The module's class name.
        call: 1 for the first call of the module in a forward, 2 for the second, ...
        shape: The output's shape, batch dimension included.
        tensor: A detached CPU float32 copy, or None when only shapes are recorded.
        kind: ``output``, or ``input`` for what a forward pre-hook saw.
        summary: What the recorder's ``summarize`` callback returned for this tensor.
        rows: How the rows were made the batch's images when the module's own were not
            (windows reassembled into each image's grid), for the layer's note.
        refused: Why the output's rows cannot be attributed to the images of the batch
            (``summary`` is then None). A recorder asked for per-image rows keeps ``tensor``
            empty, ``(images, 0)``; otherwise it is what the module returned, and whatever
            draws one image of it says this instead.
    """

    key: str
    module: str
    module_type: str
    call: int
    shape: tuple[int, ...]
    tensor: torch.Tensor | None = None
    kind: str = "output"
    summary: Any = None
    rows: str | None = None
    refused: str | None = None


@dataclass
class Skipped:
    """A selected output that could not be captured, and why."""

    key: str
    module_type: str
    reason: str


def call_key(name: str, call: int) -> str:
    """The key of the ``call``-th call of module ``name`` in a forward: ``name``, ``name:2``..."""
    return name if call == 1 else f"{name}:{call}"


class HookSession(abc.ABC):
    """Hooks on named submodules, registered on enter and all removed on exit.

    On enter the model is checked (:func:`check_hookable`), the names are resolved, a root
    forward pre-hook is registered that starts a fresh record at each forward of the model, and
    :meth:`_register` is called once per selected module. On exit, and when registration fails
    part way, every handle is removed, tensor hooks included; with ``eval_mode=True`` the model
    runs in eval mode meanwhile and each module's own ``training`` flag is restored.

    Subclasses implement :meth:`_register` with :meth:`_add_forward_hook`,
    :meth:`_add_pre_hook`, :meth:`_keep` (any other removable handle) and, inside hooks,
    :meth:`_add_tensor_hook`; their hooks number each call with :meth:`_next_call` and report
    what they cannot record with :meth:`_skip`. They
    extend :meth:`_start_record` to reset their own record, and :meth:`_close` to drop what
    must not outlive the block.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules to hook.
        eval_mode: Put every module in eval mode inside the block.
    """

    def __init__(self, model: nn.Module, layers: Sequence[str], *, eval_mode: bool = False) -> None:
        self.model = model
        self.layers = list(layers)
        self._eval_mode = eval_mode
        self._calls: dict[str, int] = {}
        self._skipped: dict[str, Skipped] = {}
        self._handles: list[RemovableHandle] = []
        # Hooks on tensors of one forward: dropped when the next forward starts.
        self._tensor_handles: list[RemovableHandle] = []
        self._training: dict[nn.Module, bool] = {}
        # Changes to the model made for the capture (a fused attention turned off), undone
        # on exit.
        self._undo: list[Callable[[], None]] = []
        # Enabled by recorders whose captures must have one row per image (actviz.windows):
        # its hooks watch the batch size and the windowed blocks' maps.
        self._rows = ImageRows(model, enabled=False)

    def __enter__(self: _Session) -> _Session:
        check_hookable(self.model)
        modules = dict(self.model.named_modules())
        missing = [name for name in self.layers if name not in modules]
        if missing:
            raise ModelError(f"the model has no module named {', '.join(missing[:5])}")
        try:
            if self._eval_mode:
                self._training = {module: module.training for module in self.model.modules()}
                self.model.eval()
            start = self.model.register_forward_pre_hook(lambda _m, _a: self._start_record())
            self._handles.append(start)
            for name in self.layers:
                self._register(name, modules[name])
            self._rows.attach(self.layers, self._add_pre_hook, self._add_forward_hook)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    def calls(self, module: str) -> int:
        """How many times ``module`` ran in the latest forward."""
        return self._calls.get(module, 0)

    def never_called(self) -> list[str]:
        """Selected modules that did not run in the latest forward."""
        return [name for name in self.layers if self._calls.get(name, 0) == 0]

    @property
    def skipped(self) -> list[Skipped]:
        """Selected outputs (or inputs) of the latest forward that could not be recorded
        (None, a string, a non-differentiable tensor, ...), with the reason."""
        return list(self._skipped.values())

    # For subclasses.
    @abc.abstractmethod
    def _register(self, name: str, module: nn.Module) -> None:
        """Register the hooks for one selected module."""

    def _add_forward_hook(
        self, module: nn.Module, hook: Callable[..., None], *, with_kwargs: bool = False
    ) -> None:
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after
        each call of ``module``, until exit."""
        self._handles.append(module.register_forward_hook(hook, with_kwargs=with_kwargs))

    def _add_pre_hook(
        self, module: nn.Module, hook: Callable[..., object], *, with_kwargs: bool = False
    ) -> None:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)``) before each call of
        ``module``, until exit; what it returns replaces the call's arguments (None: keeps
        them)."""
        self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=with_kwargs))

    def _undo_on_exit(self, undo: Callable[[], None]) -> None:
        """Call ``undo`` on exit, after the hooks are removed (latest first)."""
        self._undo.append(undo)

    def _keep(self, handle: RemovableHandle) -> None:
        """Remove ``handle`` on exit with the others: for hooks registered elsewhere than on
        a module's forward (a module's backward, an optimizer's step)."""
        self._handles.append(handle)

    def _add_tensor_hook(self, tensor: torch.Tensor, hook: Callable[[torch.Tensor], None]) -> None:
        """``hook(grad)`` when the gradient of ``tensor`` is computed, until the next forward
        starts or the block exits."""
        # torch leaves Tensor.register_hook unannotated.
        self._tensor_handles.append(tensor.register_hook(hook))  # type: ignore[no-untyped-call]

    def _next_call(self, name: str, *, count: bool = True) -> tuple[int, str]:
        """The number and key of the call of ``name`` that is happening now, counted unless
        ``count`` is False (a pre-hook whose forward hook will count the same call)."""
        call = self._calls.get(name, 0) + 1
        if count:
            self._calls[name] = call
        return call, call_key(name, call)

    def _skip(self, key: str, module: nn.Module, reason: str) -> None:
        self._skipped[key] = Skipped(key, type(module).__name__, reason)

    def _start_record(self) -> None:
        """Forget the latest forward; runs when a forward of the model starts."""
        self._drop_tensor_hooks()
        self._calls = {}
        self._skipped = {}

    def _close(self) -> None:
        """Remove every hook and restore the training flags; safe to call more than once."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._drop_tensor_hooks()
        for module, training in self._training.items():
            module.training = training
        self._training.clear()
        while self._undo:
            self._undo.pop()()

    def _drop_tensor_hooks(self) -> None:
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles.clear()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every module in eval mode for the block, then restore each one's own flag."""
    flags = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for module, training in flags.items():
            module.training = training
