"""Hooks on named modules, registered in one context manager that always removes them.

:class:`HookSession` is the one hook core: it resolves module names, names repeated calls
``name:N``, registers in ``__enter__`` and removes every handle in ``finally``. The forward and
pre-forward recorder (:class:`ActivationRecorder`, here) and the gradient recorder
(:class:`actviz.gradients.recorder.GradientRecorder`) build on it.

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

import abc
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from actviz.errors import ModelError, UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = [
    "ATTN_SUFFIX",
    "INPUT_SUFFIX",
    "ActivationRecorder",
    "Capture",
    "CaptureMode",
    "HookSession",
    "Skipped",
    "call_key",
    "capture",
    "check_hookable",
    "eval_mode",
    "layer_refs",
    "tensor_items",
]

CaptureMode = Literal["output", "input", "both", "attn"]
#: Appended to the key of a captured input: ``layer1.0.conv1<in>`` (module names have no '<').
INPUT_SUFFIX = "<in>"
#: Appended to the key of an attention capture: ``encoder.layers.encoder_layer_11<attn>``.
ATTN_SUFFIX = "<attn>"

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
    :meth:`_add_pre_hook` and, inside hooks, :meth:`_add_tensor_hook`; their hooks number each
    call with :meth:`_next_call` and report what they cannot record with :meth:`_skip`. They
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

    def _add_forward_hook(self, module: nn.Module, hook: Callable[..., None]) -> None:
        """``hook(module, args, output)`` after each call of ``module``, until exit."""
        self._handles.append(module.register_forward_hook(hook))

    def _add_pre_hook(
        self, module: nn.Module, hook: Callable[..., None], *, with_kwargs: bool = False
    ) -> None:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)``) before each call of
        ``module``, until exit."""
        self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=with_kwargs))

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

    def _drop_tensor_hooks(self) -> None:
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles.clear()


class ActivationRecorder(HookSession, Mapping[str, "torch.Tensor"]):
    """Record copies of the outputs of named submodules while the model runs.

    Hooks are registered on enter and removed on exit, even when the forward raises. Each new
    forward of the root model starts a fresh record, so after ``model(x)`` the recorder holds
    exactly that forward's outputs, in the order they were produced. As a mapping it gives
    capture key -> tensor. The modules' ``training`` flags are left alone; wrap the block in
    :func:`eval_mode` where eval mode is wanted.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules to record.
        keep_tensors: Copy the outputs (True) or record only shapes and calls (False; this
            works on the ``meta`` device).
        mode: Record each module's ``output``, its ``input`` (through a forward pre-hook,
            keyed ``name<in>``), ``both``, or ``attn``: for a module that is or holds an
            ``nn.MultiheadAttention``, each head's attention from the class token to the
            patches, ``(heads, H, W)`` per image, keyed ``name<attn>``
            (:func:`actviz.attention.class_token_attention`).
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
        if mode not in ("output", "input", "both", "attn"):
            raise UsageError(f"unknown capture mode '{mode}'; use output, input, both or attn")
        super().__init__(model, layers)
        self.keep_tensors = keep_tensors
        self.mode = mode
        self.summarize = summarize
        self._paused = False
        self._captures: dict[str, Capture] = {}

    # Mapping protocol: key -> tensor of the latest forward.
    def __getitem__(self, key: str) -> torch.Tensor:
        tensor = self._captures[key].tensor
        if tensor is None:
            raise KeyError(f"{key} was recorded without its tensor (keep_tensors=False)")
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._captures)

    def __len__(self) -> int:
        return len(self._captures)

    @property
    def captures(self) -> list[Capture]:
        """The captures of the latest forward, in the order they were produced."""
        return list(self._captures.values())

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self._start_record()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block (another pass over the model, such as a
        backward pass, must not replace the latest forward's captures)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _start_record(self) -> None:
        if self._paused:
            return
        super()._start_record()
        self._captures = {}

    def _register(self, name: str, module: nn.Module) -> None:
        """A pre-hook (inputs) and a forward hook (outputs) for one module, as the mode needs."""
        module_type = type(module).__name__
        want_in = self.mode in ("input", "both")
        want_out = self.mode in ("output", "both")

        def store(call: int, key: str, value: object, *, what: str) -> None:
            found = False
            for element, tensor in tensor_items(value):
                found = True
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
                self._captures[key + element] = Capture(
                    key + element,
                    name,
                    module_type,
                    call,
                    tuple(tensor.shape),
                    copy,
                    kind=what,
                    summary=summary,
                )
            if not found:
                self._skip(key, module, f"{what} is {type(value).__name__}, not a tensor")

        def pre_hook(_module: nn.Module, args: tuple[object, ...]) -> None:
            if self._paused:
                return
            # With outputs recorded too, the forward hook counts the call.
            call, key = self._next_call(name, count=not want_out)
            inputs = args[0] if len(args) == 1 else args
            store(call, key + INPUT_SUFFIX, inputs, what="input")

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            if self._paused:
                return
            call, key = self._next_call(name)
            store(call, key, output, what="output")

        if self.mode == "attn":
            self._register_attention(name, module, store)
            return
        if want_in:
            self._add_pre_hook(module, pre_hook)
        if want_out:
            self._add_forward_hook(module, hook)

    def _register_attention(self, name: str, module: nn.Module, store: Callable[..., None]) -> None:
        """Attention maps of the module's (first) ``nn.MultiheadAttention``, recomputed from
        the query and key it is called with; modules without one are listed as skipped."""
        from actviz.attention import class_token_attention, find_attention

        attention = find_attention(module)
        if attention is None:

            def none_inside(_module: nn.Module, _args: object, _output: object) -> None:
                if not self._paused:
                    _, key = self._next_call(name)
                    self._skip(key + ATTN_SUFFIX, module, "holds no nn.MultiheadAttention")

            self._add_forward_hook(module, none_inside)
            return

        def attention_hook(
            _module: nn.Module, args: tuple[object, ...], kwargs: dict[str, Any]
        ) -> None:
            if self._paused:
                return
            call, key = self._next_call(name)
            maps, reason = class_token_attention(attention, args, kwargs)
            if maps is None:
                self._skip(key + ATTN_SUFFIX, module, reason or "no attention map")
            else:
                store(call, key + ATTN_SUFFIX, maps, what="attention")
                # The header names what the tiles are: one per head, not channels.
                kind = f"{type(module).__name__}: class-token attention, one tile per head"
                self._captures[key + ATTN_SUFFIX].module_type = kind

        self._add_pre_hook(attention, attention_hook, with_kwargs=True)


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


def tensor_items(output: object, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a hook's output, with its suffix: "" for a bare tensor."""
    import torch

    if isinstance(output, torch.Tensor):
        yield prefix, output
    elif isinstance(output, Mapping):
        for key, value in output.items():
            yield from tensor_items(value, f"{prefix}[{key}]")
    elif isinstance(output, tuple) and hasattr(output, "_fields"):  # namedtuple
        for key, value in zip(output._fields, output, strict=True):
            yield from tensor_items(value, f"{prefix}[{key}]")
    elif isinstance(output, (tuple, list)):
        for index, value in enumerate(output):
            yield from tensor_items(value, f"{prefix}[{index}]")
