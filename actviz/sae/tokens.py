"""The layer's activation vectors, taken in the forward hook where they live (GPU or CPU), and
the layer replaced by its reconstruction (the splice), both through the hook core.

A layer's output is read as ``(C, H, W)`` maps by the plan top-images makes
(:func:`actviz.top_images.plan_layers`, through the grids' own layout decisions): one vector
per spatial position of a convolution's map, one per patch token of a ViT (its class and
register tokens dropped, as the grids drop them), one per image for a vector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.hooks import HookSession, activations
from actviz.top_images.plan import as_maps, positions
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.dictionary import SparseDictionary
    from actviz.top_images.plan import LayerPlan

__all__ = ["SpliceSession", "TokenRecorder", "maps_of", "positions"]


def maps_of(tensor: torch.Tensor, plan: LayerPlan) -> torch.Tensor | None:
    """A batch of the layer's outputs as ``(B, C, H, W)`` maps, or None when their shape is
    not the planned one (an image of another size)."""

    if tuple(tensor.shape[1:]) != plan.shape:
        return None
    return as_maps(tensor.detach(), plan)


def vectors(maps: torch.Tensor) -> torch.Tensor:
    """``(B, C, H, W)`` maps as ``(B*H*W, C)`` float32 vectors, a copy (a later in-place op
    of the model cannot change them)."""
    import torch

    c = maps.shape[1]
    return maps.permute(0, 2, 3, 1).reshape(-1, c).to(torch.float32, copy=True)


def _element(output: object, plan: LayerPlan, key: str) -> Any:
    for element, raw in activations(output):
        if key + element == plan.key:
            return raw
    return None


class TokenRecorder(HookSession):
    """The planned layer's vectors of the latest forward, on the model's device.

    After a forward, :meth:`take` gives ``(B*H*W, C)`` float32 vectors (image-major; with
    ``prefix``, a token layer's ``(B*T, C)``, every token), or None
    when the layer did not run or gave another shape than planned (then :attr:`unfit` holds
    the shape it gave).
    """

    def __init__(self, model: nn.Module, plan: LayerPlan, *, prefix: bool = False) -> None:
        super().__init__(model, [plan.module])
        self.plan = plan
        # A token layer's every token, class and register tokens included, when asked.
        self.prefix = prefix and plan.layout == "tokens"
        self._vectors: torch.Tensor | None = None
        self.unfit: tuple[int, ...] | None = None
        self._rows = ImageRows(model)  # attached on enter, as every recorder's

    def _start_record(self) -> None:
        super()._start_record()
        self._vectors = None
        self.unfit = None

    def take(self) -> torch.Tensor | None:
        taken, self._vectors = self._vectors, None
        return taken

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            raw = _element(output, self.plan, key)
            if raw is None:
                return
            tensor, _ = self._rows.split(name, raw)
            if tensor is None:
                return
            maps = maps_of(tensor, self.plan)
            if maps is None:
                self.unfit = tuple(tensor.shape[1:])
                return
            if self.prefix and tensor.ndim == 3 and tensor.shape[2] == self.plan.channels:
                self._vectors = tensor.detach().reshape(-1, tensor.shape[2]).float().clone()
            else:
                self._vectors = vectors(maps)

        self._add_forward_hook(module, hook)


class SpliceSession(HookSession):
    """The planned layer's output replaced by its reconstruction through ``sae`` (the cells
    the plan reads; a ViT's class token and anything else dropped stay as they were).

    ``spliced`` counts the forwards where the replacement happened.
    """

    def __init__(self, model: nn.Module, plan: LayerPlan, sae: SparseDictionary) -> None:
        super().__init__(model, [plan.module])
        self.plan = plan
        self.sae = sae
        self.spliced = 0
        self._where: torch.Tensor | None = None

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> object:
            import torch

            _call, key = self._next_call(name)
            if key != self.plan.key or not isinstance(output, torch.Tensor):
                return None  # only a whole-tensor output is replaced
            # A quantized model's quint8 output: spliced as the values it stands for, then
            # quantized again on its own scale for the next quantized kernel.
            values = output.dequantize() if output.is_quantized else output
            maps = maps_of(values, self.plan)
            if maps is None:
                return None
            if self._where is None or self._where.device != output.device:
                self._where = positions(self.plan, output.device)
            rebuilt = self.sae.reconstruct_maps(maps.float()).to(values.dtype)
            flat = values.reshape(output.shape[0], -1).clone()
            flat[:, self._where] = rebuilt.reshape(output.shape[0], -1)
            self.spliced += 1
            spliced = flat.reshape(output.shape)
            if not output.is_quantized:
                return spliced
            return torch.quantize_per_tensor(
                spliced, output.q_scale(), output.q_zero_point(), output.dtype
            )

        self._keep(module.register_forward_hook(hook))
