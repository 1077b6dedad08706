"""Record selected layer outputs during a forward, and their gradients during a backward.

How the gradients are taken, and why:

- A forward hook copies each selected output (so an in-place op later in the model, such as
  the ``ReLU(inplace=True)`` after ``bn1`` in torchvision ResNets, cannot change the copy) and
  registers a tensor hook on it. A tensor hook registered before an in-place modification
  receives the gradient with respect to the value before that modification, i.e. the module's
  real output.
- Backward runs as ``torch.autograd.grad(loss, input)``: it fires the tensor hooks but never
  writes ``.grad`` into the parameters, and it frees the graph when it returns. When only
  late layers matter (:func:`~actviz.gradients.cam.class_cams`) and no in-place op touched
  them, backward stops at the selected outputs instead, which costs a fraction of a full backward.
- The model runs in eval mode (each module's own flag is restored afterwards): batch-norm in
  training mode would mix the images of a batch and update its running statistics.
- Gradients and activations are copied to the CPU as float32 the moment they exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError
from actviz.hooks import Skipped, check_hookable

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = ["GradientCapture", "GradientRecorder"]


@dataclass
class GradientCapture:
    """One output of one call of one module, and the gradient of the loss with respect to it.

    Attributes:
        key: ``module`` for the first call, ``module:N`` for the N-th.
        module: The module's qualified name.
        module_type: The module's class name.
        call: 1 for the first call in the forward, 2 for the second, ...
        activation: ``(B, ...)`` CPU float32 copy of the output, taken before any later
            in-place op could change it.
        gradient: ``(B, ...)`` CPU float32 gradient of the loss with respect to that output.
        norms: The L2 norm of each image's gradient.
        note: Why the gradient is all zero, when the loss does not depend on the output.
    """

    key: str
    module: str
    module_type: str
    call: int
    activation: torch.Tensor
    gradient: torch.Tensor
    norms: tuple[float, ...]
    note: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The output's shape, batch dimension included."""
        return tuple(self.activation.shape)


@dataclass
class _Entry:
    key: str
    module: str
    module_type: str
    call: int
    activation: torch.Tensor
    gradient: torch.Tensor | None = None
    # The live output and its in-place version counter, kept only until the last backward.
    output: torch.Tensor | None = None
    version: int = 0


@dataclass
class _State:
    calls: dict[str, int] = field(default_factory=dict)
    entries: dict[str, _Entry] = field(default_factory=dict)
    skipped: dict[str, Skipped] = field(default_factory=dict)


class GradientRecorder:
    """Record selected outputs during a forward, and their gradients during a backward.

    On enter the model is put in eval mode and forward hooks are registered; on exit every
    hook (forward and tensor) is removed and each module's training flag restored, even when
    the forward or the backward raised. Each forward of the root model starts a fresh record.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules whose outputs to record.

    Example:
        >>> with GradientRecorder(model, ["layer4"]) as rec:
        ...     x = x.detach().requires_grad_(True)
        ...     logits = model(x)
        ...     rec.backward(logits[:, 281].sum(), x)
        >>> rec.captures[0].gradient.shape
        torch.Size([1, 512, 7, 7])
    """

    def __init__(self, model: nn.Module, layers: Sequence[str]) -> None:
        self.model = model
        self.layers = list(layers)
        self._state = _State()
        self._handles: list[RemovableHandle] = []
        self._tensor_handles: list[RemovableHandle] = []
        self._training: dict[nn.Module, bool] = {}
        self._backward_done = False

    def __enter__(self) -> GradientRecorder:
        check_hookable(self.model)
        modules = dict(self.model.named_modules())
        missing = [name for name in self.layers if name not in modules]
        if missing:
            raise ModelError(f"the model has no module named {', '.join(missing[:5])}")
        self._training = {module: module.training for module in self.model.modules()}
        try:
            self.model.eval()
            self._handles.append(self.model.register_forward_pre_hook(self._on_root_forward))
            for name in self.layers:
                module = modules[name]
                self._handles.append(module.register_forward_hook(self._hook_for(name, module)))
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for handle in (*self._handles, *self._tensor_handles):
            handle.remove()
        self._handles.clear()
        self._tensor_handles.clear()
        for module, training in self._training.items():
            module.training = training
        self._training.clear()
        self._release_outputs()

    def _on_root_forward(self, _module: nn.Module, _args: object) -> None:
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles.clear()
        self._state = _State()
        self._backward_done = False

    def _hook_for(self, name: str, module: nn.Module) -> Any:
        import torch

        module_type = type(module).__name__

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            state = self._state
            call = state.calls.get(name, 0) + 1
            state.calls[name] = call
            key = name if call == 1 else f"{name}:{call}"
            if not isinstance(output, torch.Tensor):
                state.skipped[key] = Skipped(
                    key, module_type, f"output is {type(output).__name__}, not one tensor"
                )
                return
            if not output.requires_grad:
                state.skipped[key] = Skipped(
                    key,
                    module_type,
                    "output has no gradient (grad disabled, or it does not depend on the "
                    "input or any parameter)",
                )
                return
            entry = _Entry(
                key,
                name,
                module_type,
                call,
                output.detach().to(device="cpu", dtype=torch.float32, copy=True),
                output=output,
                version=output._version,
            )
            state.entries[key] = entry

            def keep_gradient(grad: torch.Tensor) -> None:
                entry.gradient = grad.detach().to(device="cpu", dtype=torch.float32, copy=True)

            # torch leaves Tensor.register_hook unannotated.
            handle = output.register_hook(keep_gradient)  # type: ignore[no-untyped-call]
            self._tensor_handles.append(handle)

        return hook

    def backward(
        self,
        loss: torch.Tensor,
        inputs: torch.Tensor | Sequence[torch.Tensor],
        *,
        retain_graph: bool = False,
        stop_early: bool = False,
    ) -> tuple[torch.Tensor | None, ...]:
        """Backpropagate a scalar loss to ``inputs`` and record the selected gradients.

        Uses ``torch.autograd.grad``, so parameters' ``.grad`` stay untouched. Gradients of a
        previous backward of the same forward are replaced.

        Args:
            loss: A scalar computed from the model's output.
            inputs: Tensors that require grad and that the forward started from (usually
                the input batch after ``requires_grad_(True)``); backward runs down to them,
                so every selected output between them and the loss gets its gradient.
            retain_graph: Keep the graph for another backward of the same forward.
            stop_early: When no in-place op has changed a selected output since it was
                recorded, differentiate with respect to the selected outputs themselves, so
                backward stops at the earliest of them (much cheaper for a late layer); the
                input gradients are then not computed and returned as None.

        Returns:
            The gradient with respect to each of ``inputs`` (None where unused or skipped).
        """
        import torch

        entries = list(self._state.entries.values())
        for entry in entries:
            entry.gradient = None
        targets = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        live = [(e, e.output) for e in entries if e.output is not None]
        try:
            if stop_early and live and all(t._version == e.version for e, t in live):
                grads = torch.autograd.grad(
                    loss, [t for _, t in live], retain_graph=retain_graph, allow_unused=True
                )
                for (entry, _), grad in zip(live, grads, strict=True):
                    if grad is not None:
                        entry.gradient = grad.detach().to("cpu", torch.float32, copy=True)
                result: tuple[torch.Tensor | None, ...] = (None,) * len(targets)
            else:
                # The tensor hooks fill in the gradients on the way down to the inputs.
                result = tuple(
                    torch.autograd.grad(
                        loss,
                        targets,
                        retain_graph=retain_graph,
                        allow_unused=True,
                        materialize_grads=False,
                    )
                )
        finally:
            if not retain_graph:
                self._release_outputs()
        self._backward_done = True
        return result

    def _release_outputs(self) -> None:
        for entry in self._state.entries.values():
            entry.output = None

    @property
    def captures(self) -> list[GradientCapture]:
        """The captures of the latest forward with the latest backward's gradients.

        Raises:
            RuntimeError: Before :meth:`backward` has run for this forward.
        """
        import torch

        if not self._backward_done:
            raise RuntimeError("call backward() after the forward before reading gradients")
        out = []
        for e in self._state.entries.values():
            note = None
            gradient = e.gradient
            if gradient is None:
                note = "the loss does not depend on this output; its gradient is zero"
                gradient = torch.zeros_like(e.activation)
            # float64 so that exploding gradients do not overflow when squared.
            rows = gradient.reshape(gradient.shape[0] if gradient.ndim else 1, -1)
            norms = rows.to(torch.float64).norm(dim=1).tolist()
            out.append(
                GradientCapture(
                    e.key,
                    e.module,
                    e.module_type,
                    e.call,
                    e.activation,
                    gradient,
                    tuple(norms),
                    note,
                )
            )
        return out

    @property
    def skipped(self) -> list[Skipped]:
        """Selected outputs of the latest forward that have no gradient, with the reason."""
        return list(self._state.skipped.values())

    def never_called(self) -> list[str]:
        """Selected modules that did not run in the latest forward."""
        return [name for name in self.layers if self._state.calls.get(name, 0) == 0]
