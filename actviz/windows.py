"""Which image each row of a captured tensor belongs to.

Every picture and statistic of one image is cut from row ``i`` of a layer's output, so that
row must be image ``i``. Windowed attention breaks this: timm's and Hugging Face's Swin
blocks and timm's MaxViT partition attention cut each image's map into windows and run their
attention layers on ``images x windows`` rows. :class:`ImageRows` puts those rows back into
each image's grid, as the block itself does after its attention (the window partition undone,
padding cropped, the cyclic shift rolled back), and refuses, by name, any other output whose
first dimension is not the images of the batch: such a tensor is never attributed to an
image it does not belong to.

torchvision's Swin and MaxViT keep the batch first everywhere (their windows are reassembled
when drawn, :mod:`actviz.layouts`), so only the guard applies to them.

timm's Hiera runs its blocks on tokens in an "unrolled" order (each pooling window's tokens
together), not the image's raster: each block's output is put back into spatial order with
the model's own ``reroll``, as its ``forward_intermediates`` does.

A torchvision detector pads its resized batch to a multiple of 32 in its own transform, so its
backbone's, FPN's and RPN's maps cover the padding too. :class:`ImageRows` watches that
transform and crops each such map to the cells that see the image (:func:`padding_crop`):
every recorder built on it (a run's grids, statistics, shared scales and PCA, ``top-images``'
scores) sees the same cropped maps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "ImageRows",
    "Scheme",
    "WindowedBlock",
    "kept_cells",
    "padding_crop",
    "windowed_blocks",
]

AddPreHook = Callable[..., None]
"""``add(module, hook, with_kwargs=True)``: how a hook session registers a pre-hook."""
AddHook = Callable[[Any, Callable[..., None]], None]
"""``add(module, hook)``: how a hook session registers a forward hook."""

#: A detector's modules whose maps lie on its padded input grid (the heads after RoI pooling
#: do not): its backbone and FPN, the RPN's head, RetinaNet's and FCOS's head.
_ON_THE_GRID = ("backbone", "rpn", "head.")


def kept_cells(
    size: tuple[int, int], valid: tuple[int, int], padded: tuple[int, int]
) -> tuple[int, int]:
    """The cells of a ``size`` map over a ``padded`` input that see its ``valid`` part
    (``ceil(valid / stride)``), all as ``(height, width)``."""
    return (
        min(size[0], -(-valid[0] * size[0] // padded[0])),
        min(size[1], -(-valid[1] * size[1] // padded[1])),
    )


def padding_crop(
    tensor: torch.Tensor, valid: tuple[int, int], padded: tuple[int, int]
) -> tuple[torch.Tensor, str | None]:
    """A ``(B, C, H, W)`` map over a padded input cropped to the cells that see the image, and
    a note saying so (None when no cell was cut)."""
    h, w = int(tensor.shape[-2]), int(tensor.shape[-1])
    keep_h, keep_w = kept_cells((h, w), valid, padded)
    if (keep_h, keep_w) == (h, w):
        return tensor, None
    note = (
        f"padding cropped: the model padded its {valid[1]}x{valid[0]} input to "
        f"{padded[1]}x{padded[0]}; the {keep_w}x{keep_h} of {w}x{h} cells that see it are shown"
    )
    return tensor[..., :keep_h, :keep_w], note


@dataclass(frozen=True)
class WindowedBlock:
    """A block whose attention part runs on windows of each image.

    Attributes:
        name: The block's qualified name.
        module: The block.
        family: ``timm-swin`` (shift, then pad), ``hf-swin`` (pad, then shift),
            ``maxvit`` (channels-last windows or grid cells) or ``maxvit-2d`` (channels-first).
    """

    name: str
    module: nn.Module
    family: str


def windowed_blocks(model: nn.Module) -> dict[str, tuple[WindowedBlock, bool]]:
    """Modules of a windowed block -> the block, and whether the module is inside its
    attention child (``attn`` in timm, ``attention`` in Hugging Face), which sees only
    windows; the block's other modules see images, or windows too (Hugging Face's Swin runs
    its one dropout on both)."""
    found: dict[str, tuple[WindowedBlock, bool]] = {}
    for name, module in model.named_modules():
        family = _family(module)
        if family is None:
            continue
        child = "attention" if family == "hf-swin" else "attn"
        block = WindowedBlock(name, module, family)
        for sub, _ in module.named_modules():
            path = f"{name}.{sub}" if name and sub else name or sub
            inside = sub == child or sub.startswith(f"{child}.")
            if sub and (path not in found or inside):
                found[path] = (block, inside)
    return found


def _family(module: nn.Module) -> str | None:
    children = dict(module.named_children())
    if "attn" in children and hasattr(module, "partition_size"):
        if not hasattr(module, "partition_block"):
            return None
        return "maxvit-2d" if type(module).__name__.endswith("2d") else "maxvit"
    if not (hasattr(module, "window_size") and hasattr(module, "shift_size")):
        return None
    if "attn" in children and callable(getattr(module, "_attn", None)):
        return "timm-swin"
    if "attention" in children and hasattr(module, "input_resolution"):
        return "hf-swin"
    return None


class ImageRows:
    """Makes the first dimension of every captured tensor the images of the batch.

    :meth:`attach` hooks the model (its input gives the batch size) and the windowed blocks
    of the selected modules (their input gives the map's size); :meth:`split` then turns a
    tensor into one whose rows are the images, or says why it cannot.

    Args:
        model: The hooked model.
        enabled: False leaves every tensor as the module returned it (and hooks nothing).
    """

    def __init__(self, model: nn.Module, *, enabled: bool = True) -> None:
        self.model = model
        self.enabled = enabled
        self.batch: int | None = None
        self._blocks: dict[str, tuple[WindowedBlock, bool]] | None = None
        self._sizes: dict[str, tuple[int, int]] = {}
        self.pair = False
        """The model was called on a pair of image batches (optical flow: ``model(a, b)``)."""
        self.padding: tuple[tuple[int, int], tuple[int, int]] | None = None
        """A detector's latest batch: the part that is image (the largest resized image) and
        the padded size, as ``(height, width)``; None when nothing was padded."""

    def attach(
        self, names: Sequence[str], add_pre_hook: AddPreHook, add_hook: AddHook | None = None
    ) -> None:
        """Register the pre-hooks that watch the batch size and the windowed blocks' maps,
        and (with ``add_hook``) the hook that watches a detector's padding."""
        if not self.enabled:
            return
        self._blocks = windowed_blocks(self.model)
        add_pre_hook(self.model, self._watch_batch, with_kwargs=True)
        transform = getattr(self.model, "transform", None)
        if add_hook is not None and type(transform).__name__ == "GeneralizedRCNNTransform":
            add_hook(transform, self._watch_padding)
        watched: set[str] = set()
        for name in names:
            block, _ = self._blocks.get(name, (None, False))
            if block is not None and block.name not in watched:
                watched.add(block.name)
                add_pre_hook(block.module, self._watcher(block), with_kwargs=True)

    def _watch_batch(self, _module: nn.Module, args: tuple[Any, ...], kwargs: Any) -> None:
        self.batch = _batch_size([*args, *kwargs.values()])
        self._sizes = {}
        self.pair = _is_pair([*args, *kwargs.values()])
        self.padding = None

    def _watch_padding(self, _module: nn.Module, _args: object, output: Any) -> None:
        images = output[0]  # (ImageList, targets)
        sizes = [(int(h), int(w)) for h, w in images.image_sizes]
        valid = (max(h for h, _ in sizes), max(w for _, w in sizes)) if sizes else None
        padded = (int(images.tensors.shape[-2]), int(images.tensors.shape[-1]))
        self.padding = (valid, padded) if valid is not None and valid != padded else None

    def _watcher(self, block: WindowedBlock) -> Callable[..., None]:
        def watch(_module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
            size = _map_size(block, args, kwargs)
            if size is None:
                self._sizes.pop(block.name, None)
            else:
                self._sizes[block.name] = size

        return watch

    def split(self, name: str, tensor: torch.Tensor) -> tuple[torch.Tensor | None, str | None]:
        """``tensor`` (from module ``name``) with one row per image, and a note on what was
        done (None when nothing was); or None and why its rows cannot be the images."""
        batch = self.batch
        if self.pair and batch and tensor.ndim == 4 and int(tensor.shape[0]) == 2 * batch:
            # An encoder run on both images of each pair in one batch (RAFT's): image i's
            # rows i and batch + i as its two frames, (B, C, 2, H, W).
            frames = tensor.reshape(2, batch, *tensor.shape[1:]).permute(1, 2, 0, 3, 4)
            return frames, "both images of each pair in one batch: drawn as frame 1 and frame 2"
        scheme, why = self.scheme(name, tensor)
        if why is not None and scheme is None:
            return None, why
        if scheme is None:
            rolled = self._rerolled(name, tensor)
            return rolled if rolled is not None else self._crop(name, tensor)
        return scheme.reassemble(tensor)

    def _rerolled(self, name: str, tensor: torch.Tensor) -> tuple[torch.Tensor, str] | None:
        """A Hiera block's unrolled ``(B, N, C)`` tokens as ``(B, H, W, C)`` in spatial order
        (the model's ``reroll``); None for any other module."""
        reroll: Any = getattr(self.model, "reroll", None)
        if type(reroll).__name__ != "Reroll" or tensor.ndim != 3:
            return None
        match = re.fullmatch(r"blocks\.(\d+)", name)
        if match is None or int(match.group(1)) not in getattr(reroll, "schedule", {}):
            return None
        try:
            rolled: torch.Tensor = reroll(tensor, int(match.group(1)))
        except (RuntimeError, ValueError):  # not the token count the schedule was made for
            return None
        h, w = (int(n) for n in rolled.shape[1:3])
        return rolled, f"Hiera's unrolled tokens put back into the image's {h} x {w} grid"

    def unattributed(self, name: str, tensor: torch.Tensor) -> str | None:
        """Why ``tensor``'s rows, as the module returned them, are not the images of the
        batch (windows of each image, or rows in no known order); None when they are."""
        scheme, why = self.scheme(name, tensor)
        if why is not None:
            return why
        if scheme is None:
            return None
        return (
            f"its first dimension holds {scheme.windows} windows of each image, as the "
            "module returned them; drawn per image where captured with per_image=True "
            "(actviz.show, run)"
        )

    def _crop(self, name: str, tensor: torch.Tensor) -> tuple[torch.Tensor, str | None]:
        """A detector's map on its padded input grid cropped to the cells that see the image
        (all images of a batch have one size: the loader batches inputs of one shape)."""
        if self.padding is None or tensor.ndim != 4 or not name.startswith(_ON_THE_GRID):
            return tensor, None
        return padding_crop(tensor, *self.padding)

    def scheme(self, name: str, tensor: torch.Tensor) -> tuple[Scheme | None, str | None]:
        """How ``tensor``'s rows become the images: a :class:`Scheme` to apply (to it, or to
        its gradient later), None when they already are; or None and why they cannot be."""
        batch = self.batch
        if batch is None or not self.enabled:
            return None, None
        if tensor.ndim == 0:
            return None, _refusal(tensor, batch)
        block, inside = (self._blocks or {}).get(name, (None, False))
        size = self._sizes.get(block.name) if block is not None else None
        if block is not None and size is not None:
            scheme = _scheme(block, batch, size)
            # With one window per image, only the attention's rows are known to be windows.
            if (
                scheme is not None
                and int(tensor.shape[0]) == batch * scheme.windows
                and (inside or scheme.windows > 1)
            ):
                return scheme, None
        if int(tensor.shape[0]) == batch:
            return None, None
        return None, _refusal(tensor, batch)


def _refusal(tensor: torch.Tensor, batch: int) -> str:
    """Why a tensor's rows are not the images, in words that do not depend on the batch size
    (a run's note is the same whichever batch an image came in)."""
    shape = tuple(int(n) for n in tensor.shape)
    if not shape:
        return "one number for the whole batch (shape ()); it belongs to no one image"
    rows = shape[0]
    if rows % batch == 0:
        what = (
            f"its first dimension holds {rows // batch} rows per image (windows or tokens of "
            "each image, in an order the model's structure does not say)"
        )
    else:
        what = (
            f"its first dimension ({rows} rows of {shape[1:]}) does not follow the images of "
            "the batch (a tensor shared by the batch, or rows in another order)"
        )
    return f"{what}; its rows cannot be attributed to images, so it is not drawn"


def _batch_size(values: Sequence[Any]) -> int | None:
    """The batch size of a model's inputs: the first tensor's first dimension (or the length
    of a first list of image tensors, as detection models take)."""
    import torch

    for value in values:
        if isinstance(value, torch.Tensor):
            return int(value.shape[0]) if value.ndim else None
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return len(value)
    return None


def _is_pair(values: Sequence[Any]) -> bool:
    """Whether a model's first two inputs are two image batches of one shape (a pair)."""
    import torch

    tensors = [v for v in values[:2] if isinstance(v, torch.Tensor)]
    return len(tensors) == 2 and tensors[0].ndim == 4 and tensors[0].shape == tensors[1].shape


def _map_size(
    block: WindowedBlock, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[int, int] | None:
    """The height and width of the map a windowed block is called on."""
    import torch

    x = args[0] if args else next(iter(kwargs.values()), None)
    if not isinstance(x, torch.Tensor) or x.ndim < 3:
        return None
    if block.family == "hf-swin":
        dims = args[1] if len(args) > 1 else kwargs.get("input_dimensions")
        if isinstance(dims, (tuple, list)) and len(dims) == 2:
            return int(dims[0]), int(dims[1])
        return None
    if x.ndim != 4:
        return None
    if block.family == "maxvit-2d":
        return int(x.shape[2]), int(x.shape[3])
    return int(x.shape[1]), int(x.shape[2])


def _pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    try:
        side = int(value)
    except (TypeError, ValueError):
        return None
    return side, side


def _scheme(block: WindowedBlock, batch: int, size: tuple[int, int]) -> Scheme | None:
    """How the block cut this call's map into windows, read from its attributes now (Hugging
    Face's Swin shrinks its window to a small map inside its forward, before its attention)."""
    module = block.module
    if block.family.startswith("maxvit"):
        window = _pair(getattr(module, "partition_size", None))
        shift: tuple[int, int] | None = (0, 0)
        grid = not bool(getattr(module, "partition_block", True))
    else:
        window = _pair(getattr(module, "window_size", None))
        shift = _pair(getattr(module, "shift_size", None))
        grid = False
    if window is None or shift is None or min(window) < 1:
        return None
    h, w = size
    padded = (-(-h // window[0]) * window[0], -(-w // window[1]) * window[1])
    if grid and padded != size:
        return None
    return Scheme(block, batch, size, padded, window, shift, grid)


@dataclass(frozen=True)
class Scheme:
    """How one call of a windowed block cut a batch's maps into windows: enough to put any
    per-window tensor of it (an output, or its gradient) back into each image's grid."""

    block: WindowedBlock
    batch: int
    size: tuple[int, int]
    padded: tuple[int, int]
    window: tuple[int, int]
    shift: tuple[int, int]
    grid: bool

    @property
    def windows(self) -> int:
        return (self.padded[0] // self.window[0]) * (self.padded[1] // self.window[1])

    def reassemble(self, tensor: torch.Tensor) -> tuple[torch.Tensor, str]:
        """Per-window rows -> ``(B, H, W, C)`` (``(B, C, H, W)`` for channels-first windows),
        or ``(B, windows, ...)`` for what is not a map of the window (attention weights)."""
        wh, ww = self.window
        rest = tuple(int(n) for n in tensor.shape[1:])
        n = self.windows
        where = f"{n} window(s) of {wh} x {ww}"
        if self.grid:
            where = f"{n} grid cell(s) of {wh} x {ww} tokens strided over the map"
        x: torch.Tensor
        if self.block.family == "maxvit-2d" and len(rest) == 3 and rest[1:] == (wh, ww):
            x = self._grid(tensor.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        elif len(rest) == 3 and rest[:2] == (wh, ww) or len(rest) == 2 and rest[0] == wh * ww:
            x = self._grid(tensor.reshape(tensor.shape[0], wh, ww, rest[-1]))
        else:
            per_image = tensor.reshape(self.batch, n, *rest)
            return per_image, f"one row per window ({where} per image)"
        h, w = self.size
        return x, f"{where} reassembled into the image's {h} x {w} grid"

    def _grid(self, windows: torch.Tensor) -> torch.Tensor:
        """``(B * windows, wh, ww, C)`` -> ``(B, H, W, C)``: the block's own reverse."""
        import torch

        (wh, ww), (hp, wp), (h, w) = self.window, self.padded, self.size
        c = windows.shape[-1]
        if self.grid:  # timm's grid_reverse: tokens strided over the map
            x = windows.reshape(self.batch, hp // wh, wp // ww, wh, ww, c)
            x = x.permute(0, 3, 1, 4, 2, 5)
        else:
            x = windows.reshape(self.batch, hp // wh, wp // ww, wh, ww, c)
            x = x.permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(self.batch, hp, wp, c)
        shifted = self.shift != (0, 0)
        if shifted and self.block.family == "hf-swin":  # shifted after padding: roll, crop
            x = torch.roll(x, shifts=self.shift, dims=(1, 2))
        x = x[:, :h, :w]
        if shifted and self.block.family == "timm-swin":  # shifted before padding
            x = torch.roll(x, shifts=self.shift, dims=(1, 2))
        return x.contiguous()
