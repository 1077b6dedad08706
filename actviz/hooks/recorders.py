"""Record copies of what named modules output (or take in, or attend to) while the model runs.

:class:`ActivationRecorder` is the forward and pre-forward recorder on the hook core
(:class:`actviz.hooks.session.HookSession`). The policies that make the pictures true live here:

- Outputs are copied inside the hook. ``detach()`` shares storage, and torchvision ResNets
  follow ``bn1`` with an in-place ReLU, so an uncopied ``bn1`` output would turn into a
  post-ReLU one by the time anyone looks at it.
- Copies go to the CPU as float32, so accelerator memory does not grow with the number of
  hooked layers, and half-precision outputs can be drawn.
- A module called several times in one forward (ResNet blocks reuse ``self.relu``) gives one
  capture per call: ``layer1.0.relu``, ``layer1.0.relu:2``, ...
- Tuple, list, dict and namedtuple outputs give one capture per tensor element:
  ``block[0]``, ``heads[out]``.
- A quantized model's ``quint8`` outputs are recorded dequantized.
- What a module returns is what is recorded: an LSTM's ``(layers, B, H)`` state, a
  sequence-first output, windowed attention's ``images x windows`` rows. Making each
  capture's first dimension the images of the batch is drawing's policy, asked for with
  ``per_image=True``; without it, ``Capture.refused`` still says why a tensor's rows are not
  the images, so whatever draws from the capture can say so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from actviz.attention import (
    class_token_attention,
    class_token_rows,
    find_attention,
    find_weights_tap,
)
from actviz.contexts import layer_contexts
from actviz.errors import UsageError
from actviz.hooks.refs import layer_refs, tensor_items
from actviz.hooks.session import Capture, HookSession, call_key
from actviz.selectors import MODULE_LISTING, select_layers
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.attention import WeightsTap
    from actviz.contexts import LayerContext

__all__ = ["ATTN_SUFFIX", "INPUT_SUFFIX", "ActivationRecorder", "CaptureMode", "capture"]

CaptureMode = Literal["output", "input", "both", "attn"]
#: Appended to the key of a captured input: ``layer1.0.conv1<in>`` (module names have no '<').
INPUT_SUFFIX = "<in>"
#: Appended to the key of an attention capture: ``encoder.layers.encoder_layer_11<attn>``.
ATTN_SUFFIX = "<attn>"


class ActivationRecorder(HookSession, Mapping[str, "torch.Tensor"]):
    """Record copies of the outputs of named submodules while the model runs (a
    :class:`~actviz.hooks.session.HookSession`): after ``model(x)`` it maps each capture key
    of that forward, in the order produced, to its tensor. The modules' ``training`` flags
    are left alone; wrap the block in :func:`eval_mode` where eval mode is wanted.

    Args:
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
        per_image: False (the default) records what the modules return, as a plain hook
            sees it; ``Capture.refused`` says why a tensor's rows are not the images of the
            batch, where they are not. True, for drawing one image at a time: make each
            capture's first dimension the images of the batch: windowed attention's
            ``images x windows`` rows (timm's and Hugging Face's Swin, timm's MaxViT)
            reassembled into each image's grid, ``(B, H, W, C)``, a detector's maps cropped
            to the image; any other output whose first dimension is not the batch is kept
            empty, ``(B, 0)``, with the reason in ``Capture.refused``
            (:class:`actviz.windows.ImageRows`).

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
        per_image: bool = False,
    ) -> None:
        if mode not in ("output", "input", "both", "attn"):
            raise UsageError(f"unknown capture mode '{mode}'; use output, input, both or attn")
        super().__init__(model, layers)
        self.keep_tensors = keep_tensors
        self.mode = mode
        self.summarize = summarize
        self._paused = False
        self._captures: dict[str, Capture] = {}
        self._contexts: dict[str, LayerContext] | None = None
        self.per_image = per_image
        # Watches the batch (and windowed blocks) either way: without per_image its verdict
        # is only said, in Capture.refused.
        self._rows = ImageRows(model)

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
            for element, out in tensor_items(value):
                found = True
                # A quantized model's outputs are quint8: recorded as the values they stand for.
                raw = out.dequantize() if out.is_quantized else out
                tensor, rows, refused = self._per_image(name, raw)
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
                    self.summarize(name, tensor.detach())
                    if self.summarize is not None and refused is None
                    else None
                )
                self._captures[key + element] = Capture(
                    key + element,
                    name,
                    module_type,
                    call,
                    tuple((raw if refused else tensor).shape),
                    copy,
                    kind=what,
                    summary=summary,
                    rows=rows,
                    refused=refused,
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

    def _per_image(
        self, name: str, tensor: torch.Tensor
    ) -> tuple[torch.Tensor, str | None, str | None]:
        """The tensor with one row per image, how that was done, and why it could not be
        (then the tensor is an empty ``(images, 0)``); without ``per_image``, the tensor as
        the module returned it and why its rows are not the images."""
        if not self.per_image:
            return tensor, None, self._rows.unattributed(name, tensor)
        split, note = self._rows.split(name, tensor)
        if split is not None:
            return split, note, None
        batch = self._rows.batch or 1
        return tensor.new_empty((batch, 0)), None, note

    def _register_attention(self, name: str, module: nn.Module, store: Callable[..., None]) -> None:
        """Attention maps of the module's (first) ``nn.MultiheadAttention``, recomputed from
        the query and key it is called with; modules without one are listed as skipped."""

        attention = find_attention(module)
        tap = find_weights_tap(module) if attention is None else None
        if tap is not None:
            self._register_weights_tap(name, module, tap, store)
            return
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

    def _register_weights_tap(
        self, name: str, module: nn.Module, tap: WeightsTap, store: Callable[..., None]
    ) -> None:
        """Attention maps of a timm or Hugging Face attention layer, from the weights it forms
        with its fused kernel off (for this capture only)."""

        if self._contexts is None:
            self._contexts = layer_contexts(self.model)
        ctx = self._contexts.get(name)
        prefix = ctx.prefix_tokens if ctx is not None else 0
        grid = ctx.token_grid if ctx is not None else None
        self._undo_on_exit(tap.unfuse())

        def counted(_module: nn.Module, _args: object, _output: object) -> None:
            if not self._paused:
                self._next_call(name)

        def weights_hook(_module: nn.Module, _args: object, output: object) -> None:
            if self._paused:
                return
            # The module's own forward hook (below) counts this call once it returns.
            call = self.calls(name) + 1
            key = call_key(name, call)
            weights = tap.weights(output)
            if weights is None:
                self._skip(key + ATTN_SUFFIX, module, "the attention returned no weights")
                return
            maps, reason = class_token_rows(weights.detach(), prefix, grid)
            if maps is None:
                self._skip(key + ATTN_SUFFIX, module, reason or "no attention map")
                return
            store(call, key + ATTN_SUFFIX, maps, what="attention")
            kind = f"{type(module).__name__}: class-token attention, one tile per head"
            self._captures[key + ATTN_SUFFIX].module_type = kind

        self._add_forward_hook(tap.module, weights_hook)
        self._add_forward_hook(module, counted)


def capture(model: nn.Module, layers: str | Sequence[str] = "conv") -> ActivationRecorder:
    """An :class:`ActivationRecorder` on the layers a selector (``conv``, ``layer4.*``,
    ``re:...``, ``!term``; see ``actviz.selectors``) matches. Each entry is a copy of what
    a plain forward hook sees (an LSTM's ``(layers, B, H)`` state included), on the CPU as
    float32; ``captures[i].refused`` says where its rows are not the images of the batch.

    Raises:
        LayerSelectionError: If the selector matches nothing.

    Example:
        >>> with actviz.capture(model, "conv") as acts:
        ...     model(x)
        >>> {k: tuple(v.shape) for k, v in acts.items()}
    """

    names = select_layers(
        layer_refs(model), layers, model=type(model).__name__, listing=MODULE_LISTING
    )
    return ActivationRecorder(model, names)


def _float32() -> torch.dtype:
    import torch

    return torch.float32


def _contiguous() -> torch.memory_format:
    import torch

    return torch.contiguous_format
