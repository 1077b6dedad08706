"""Forward hooks, registered in one context manager that always removes them.

The policies that make the pictures true live here:

- Outputs are copied inside the hook. ``detach()`` shares storage, and torchvision ResNets
  follow ``bn1`` with an in-place ReLU, so an uncopied ``bn1`` output would turn into a
  post-ReLU one by the time anyone looks at it.
- Copies go to the CPU as float32, so accelerator memory does not grow with the number of
  hooked layers, and half-precision outputs can be drawn.
- A module called several times in one forward (ResNet blocks reuse ``self.relu``) gives one
  capture per call: ``layer1.0.relu``, ``layer1.0.relu:2``, ...
- Tuple, list, dict and namedtuple outputs give one capture per tensor element:
  ``block[0]``, ``heads[out]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from actviz.errors import ModelError, UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = [
    "INPUT_SUFFIX",
    "ActivationRecorder",
    "Capture",
    "CaptureMode",
    "Skipped",
    "capture",
    "check_hookable",
    "eval_mode",
    "layer_refs",
]

CaptureMode = Literal["output", "input", "both"]
#: Appended to the key of a captured input: ``layer1.0.conv1<in>`` (module names have no '<').
INPUT_SUFFIX = "<in>"


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
    """

    key: str
    module: str
    module_type: str
    call: int
    shape: tuple[int, ...]
    tensor: torch.Tensor | None = None
    kind: str = "output"
    summary: Any = None


@dataclass
class Skipped:
    """A selected output that could not be captured, and why."""

    key: str
    module_type: str
    reason: str


@dataclass
class _State:
    calls: dict[str, int] = field(default_factory=dict)
    captures: dict[str, Capture] = field(default_factory=dict)
    skipped: dict[str, Skipped] = field(default_factory=dict)


class ActivationRecorder(Mapping[str, "torch.Tensor"]):
    """Record copies of the outputs of named submodules while the model runs.

    Hooks are registered on enter and removed on exit, even when the forward raises. Each new
    forward of the root model starts a fresh record, so after ``model(x)`` the recorder holds
    exactly that forward's outputs, in the order they were produced. As a mapping it gives
    capture key -> tensor.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules to record.
        keep_tensors: Copy the outputs (True) or record only shapes and calls (False; this
            works on the ``meta`` device).
        mode: Record each module's ``output``, its ``input`` (through a forward pre-hook,
            keyed ``name<in>``), or ``both``.
        summarize: Called as ``summarize(module_name, tensor)`` on each captured tensor where
            it lives (on the device, before the copy); the result is kept in
            ``Capture.summary``. Statistics are cheapest there.

    Example:
        >>> with ActivationRecorder(model, ["layer1.0.conv1"]) as acts:
        ...     model(x)
        >>> acts["layer1.0.conv1"].shape
        torch.Size([1, 64, 56, 56])
    """

    def __init__(
        self,
        model: nn.Module,
        layers: Sequence[str],
        *,
        keep_tensors: bool = True,
        mode: CaptureMode = "output",
        summarize: Callable[[str, torch.Tensor], Any] | None = None,
    ) -> None:
        if mode not in ("output", "input", "both"):
            raise UsageError(f"unknown capture mode '{mode}'; use output, input or both")
        self.model = model
        self.layers = list(layers)
        self.keep_tensors = keep_tensors
        self.mode = mode
        self.summarize = summarize
        self._paused = False
        self._state = _State()
        self._handles: list[RemovableHandle] = []

    # Mapping protocol: key -> tensor of the latest forward.
    def __getitem__(self, key: str) -> torch.Tensor:
        tensor = self._state.captures[key].tensor
        if tensor is None:
            raise KeyError(f"{key} was recorded without its tensor (keep_tensors=False)")
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.captures)

    def __len__(self) -> int:
        return len(self._state.captures)

    @property
    def captures(self) -> list[Capture]:
        """The captures of the latest forward, in the order they were produced."""
        return list(self._state.captures.values())

    @property
    def skipped(self) -> list[Skipped]:
        """Selected outputs that held no tensor (None, a string, ...), with the reason."""
        return list(self._state.skipped.values())

    def calls(self, module: str) -> int:
        """How many times ``module`` ran in the latest forward."""
        return self._state.calls.get(module, 0)

    def never_called(self) -> list[str]:
        """Selected modules that did not run in the latest forward."""
        return [name for name in self.layers if self._state.calls.get(name, 0) == 0]

    def clear(self) -> None:
        """Forget everything recorded so far."""
        if not self._paused:
            self._state = _State()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block (another pass over the model, such as a
        backward pass, must not replace the latest forward's captures)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def __enter__(self) -> ActivationRecorder:
        check_hookable(self.model)
        modules = dict(self.model.named_modules())
        missing = [name for name in self.layers if name not in modules]
        if missing:
            raise ModelError(f"the model has no module named {', '.join(missing[:5])}")
        try:
            self._handles.append(self.model.register_forward_pre_hook(lambda _m, _a: self.clear()))
            for name in self.layers:
                module = modules[name]
                pre_hook, hook = self._hooks_for(name, module)
                if pre_hook is not None:
                    self._handles.append(module.register_forward_pre_hook(pre_hook))
                if hook is not None:
                    self._handles.append(module.register_forward_hook(hook))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._remove()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hooks_for(self, name: str, module: nn.Module) -> tuple[Any, Any]:
        """The pre-hook (inputs) and hook (outputs) for one module, as the mode needs."""
        module_type = type(module).__name__
        want_in = self.mode in ("input", "both")
        want_out = self.mode in ("output", "both")

        def store(call: int, value: object, *, what: str, suffix: str) -> None:
            state = self._state
            base = (name if call == 1 else f"{name}:{call}") + suffix
            found = False
            for element, tensor in _tensors(value):
                found = True
                key = base + element
                copy = (
                    # contiguous_format: channels-last outputs come back in plain NCHW order.
                    tensor.detach().to(
                        device="cpu",
                        dtype=_float32(),
                        copy=True,
                        memory_format=_contiguous(),
                    )
                    if self.keep_tensors
                    else None
                )
                summary = (
                    self.summarize(name, tensor.detach()) if self.summarize is not None else None
                )
                state.captures[key] = Capture(
                    key,
                    name,
                    module_type,
                    call,
                    tuple(tensor.shape),
                    copy,
                    kind=what,
                    summary=summary,
                )
            if not found:
                state.skipped[base] = Skipped(
                    base, module_type, f"{what} is {type(value).__name__}, not a tensor"
                )

        def pre_hook(_module: nn.Module, args: tuple[object, ...]) -> None:
            if self._paused:
                return
            call = self._state.calls.get(name, 0) + 1
            if not want_out:  # otherwise the output hook counts the call
                self._state.calls[name] = call
            inputs = args[0] if len(args) == 1 else args
            store(call, inputs, what="input", suffix=INPUT_SUFFIX)

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            if self._paused:
                return
            call = self._state.calls.get(name, 0) + 1
            self._state.calls[name] = call
            store(call, output, what="output", suffix="")

        return (pre_hook if want_in else None), (hook if want_out else None)


def capture(model: nn.Module, layers: str | Sequence[str] = "conv") -> ActivationRecorder:
    """Hook the layers a selector matches; use as ``with capture(model, "conv") as acts:``.

    Args:
        model: Any ``nn.Module``.
        layers: A selector (``conv``, ``layer4.*``, ``re:...``, ``!term``; see
            ``actviz.selectors``).

    Returns:
        An :class:`ActivationRecorder` to use as a context manager.

    Raises:
        LayerSelectionError: If the selector matches nothing.

    Example:
        >>> with actviz.capture(model, "conv") as acts:
        ...     model(x)
        >>> {k: tuple(v.shape) for k, v in acts.items()}
    """
    from actviz.selectors import select_layers

    names = select_layers(layer_refs(model), layers, model=type(model).__name__)
    return ActivationRecorder(model, names)


def layer_refs(model: nn.Module) -> list[Any]:
    """The selector's view of a model's modules, in registration order."""
    from actviz.selectors import LayerRef

    refs = []
    for name, module in model.named_modules():
        if not name:
            continue
        types = tuple(
            cls.__name__ for cls in type(module).__mro__ if cls.__name__ not in ("object",)
        )
        refs.append(LayerRef(name, types, leaf=next(iter(module.children()), None) is None))
    return refs


def check_hookable(model: nn.Module) -> None:
    """Refuse models whose forward hooks may silently not fire.

    Raises:
        ModelError: For TorchScript and ``torch.compile``'d models.
    """
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        raise ModelError(
            "this is a TorchScript model, whose forward hooks do not fire reliably; "
            "pass the eager nn.Module instead"
        )
    if hasattr(model, "_orig_mod"):
        raise ModelError(
            "this model was wrapped by torch.compile, which may skip forward hooks; "
            "pass the original module (model._orig_mod) instead"
        )


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


def _float32() -> torch.dtype:
    import torch

    return torch.float32


def _contiguous() -> torch.memory_format:
    import torch

    return torch.contiguous_format


def _tensors(output: object, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a hook's output, with its suffix: "" for a bare tensor."""
    import torch

    if isinstance(output, torch.Tensor):
        yield prefix, output
    elif isinstance(output, Mapping):
        for key, value in output.items():
            yield from _tensors(value, f"{prefix}[{key}]")
    elif isinstance(output, tuple) and hasattr(output, "_fields"):  # namedtuple
        for key, value in zip(output._fields, output, strict=True):
            yield from _tensors(value, f"{prefix}[{key}]")
    elif isinstance(output, (tuple, list)):
        for index, value in enumerate(output):
            yield from _tensors(value, f"{prefix}[{index}]")
