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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.hooks import HookSession, tensor_items
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.windows import Scheme

__all__ = ["GradientCapture", "GradientRecorder"]


@dataclass
class GradientCapture:
    """One output of one call of one module, and the gradient of the loss with respect to it.

    Attributes:
        key, module, module_type, call: As for :class:`~actviz.hooks.session.Capture`.
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
    # How the output's rows become the images (windowed attention), for its gradient too.
    scheme: Scheme | None = None

    def keep(self, grad: torch.Tensor) -> None:
        """Keep a CPU float32 copy of the output's gradient, one row per image."""
        import torch

        per_image = grad.detach() if self.scheme is None else self.scheme.reassemble(grad)[0]
        self.gradient = per_image.detach().to("cpu", torch.float32, copy=True)


class GradientRecorder(HookSession):
    """Record selected outputs during a forward, and their gradients during a backward: a
    :class:`~actviz.hooks.session.HookSession` in eval mode, tensor hooks included.

    Example:
        >>> with GradientRecorder(model, ["layer4"]) as rec:
        ...     x = x.detach().requires_grad_(True)
        ...     logits = model(x)
        ...     rec.backward(logits[:, 281].sum(), x)
        >>> rec.captures[0].gradient.shape
        torch.Size([1, 512, 7, 7])
    """

    def __init__(self, model: nn.Module, layers: Sequence[str]) -> None:
        super().__init__(model, layers, eval_mode=True)
        self._entries: dict[str, _Entry] = {}
        self._backward_done = False
        self._rows = ImageRows(model)

    def _start_record(self) -> None:
        super()._start_record()
        self._entries = {}
        self._backward_done = False

    def _close(self) -> None:
        super()._close()
        self._release_outputs()

    def _register(self, name: str, module: nn.Module) -> None:
        """A forward hook that copies the output and hooks the output tensor's gradient."""

        def hook(_module: nn.Module, _args: object, output: object) -> None:
            call, key = self._next_call(name)
            # A tuple or dict output (a Hugging Face Swin stage) gives one entry per tensor,
            # keyed as activation captures key them: ``name[0]``, ``name[1]``, ...
            items = list(tensor_items(output, key))
            if not items:
                self._skip(key, module, f"output is {type(output).__name__}, not one tensor")
                return
            live = [(item, tensor) for item, tensor in items if tensor.requires_grad]
            if not live:
                self._skip(
                    key,
                    module,
                    "output has no gradient (grad disabled, or it does not depend on the "
                    "input or any parameter)",
                )
                return
            for item, tensor in live:
                self._record_output(item, name, module, call, tensor)

        self._add_forward_hook(module, hook)

    def _record_output(
        self, key: str, name: str, module: nn.Module, call: int, output: torch.Tensor
    ) -> None:
        """Copy one output tensor and hook its gradient."""
        import torch

        # Windowed attention's rows put back into each image's grid, its gradient's too;
        # rows that are not the images have no gradient per image.
        scheme, refused = self._rows.scheme(name, output)
        if refused is not None:
            self._skip(key, module, refused)
            return
        detached = output.detach()
        activation = detached if scheme is None else scheme.reassemble(detached)[0]
        entry = _Entry(
            key,
            name,
            type(module).__name__,
            call,
            activation.detach().to(device="cpu", dtype=torch.float32, copy=True),
            output=output,
            version=output._version,
            scheme=scheme,
        )
        self._entries[key] = entry
        self._add_tensor_hook(output, entry.keep)

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

        entries = list(self._entries.values())
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
                        entry.keep(grad)
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
        for entry in self._entries.values():
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
        for e in self._entries.values():
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
