"""Layouts: how one image's slice of a layer output becomes something drawable.

A captured output is not always ``(C, H, W)``. Vision transformers emit token sequences
``(1 + H*W, C)``; Swin blocks and the LayerNorm/Linear pair inside a ConvNeXt block work
channels-last ``(H, W, C)``; MaxViT's attention runs on windows ``(windows, tokens, C)``;
heads emit vectors ``(C,)``. Each is turned into ``(C, H, W)`` maps or a ``(C,)`` vector on
purpose, and :class:`Drawable` says what was done, or why nothing can be drawn.

The decision uses what the model's structure says about each module
(:func:`layer_contexts`: channel counts, ``Permute`` modules, patch grids, window partitions)
together with the output's shape. Numbers alone decide one thing only: a square token count
when the model names no patch grid, and the note then says the grid was inferred. A truly
ambiguous ``(C, H, W)``/``(H, W, C)`` shape is drawn channels-first with a note saying so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast, get_args

import numpy as np
import numpy.typing as npt

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "LAYOUTS",
    "Drawable",
    "LayerContext",
    "Layout",
    "default_selector",
    "layer_contexts",
    "plan_layout",
    "to_drawable",
]

Layout = Literal["auto", "nchw", "nhwc", "tokens"]
#: The values ``--layout`` accepts.
LAYOUTS: tuple[str, ...] = get_args(Layout)

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class LayerContext:
    """What the model's structure says about one module, gathered once per model.

    Attributes:
        module_type: The module's class name.
        channels_hint: The number of channels the module produces, when its structure says
            so: ``Conv2d.out_channels``, ``Linear.out_features``, ``LayerNorm``'s last
            normalized dimension, ...; for a container, that of its last such descendant.
        token_grid: The patch grid ``(rows, cols)`` of a ViT-like model for the input size
            given to :func:`layer_contexts`, e.g. ``(14, 14)`` for ``vit_b_16`` at 224.
        prefix_tokens: Tokens before the patch tokens (class, distillation, register tokens)
            that are dropped before reshaping, e.g. 1 for torchvision's ViT.
        channels_last: True when the module sits where the model works channels-last (after
            a ``Permute`` to ``(N, H, W, C)``, as in Swin or inside a ConvNeXt block), False
            where it works channels-first, None when the structure does not say.
        windows: For outputs inside a MaxViT-style partition attention layer, ``(rows, cols,
            side, swapped)``: a grid of ``rows x cols`` windows of ``side x side`` tokens,
            with the window and token axes swapped (grid attention) when ``swapped``.
    """

    module_type: str
    channels_hint: int | None = None
    token_grid: tuple[int, int] | None = None
    prefix_tokens: int = 0
    channels_last: bool | None = None
    windows: tuple[int, int, int, bool] | None = None


@dataclass(frozen=True)
class Drawable:
    """One image's slice of an output, ready for ``render_grid`` or ``render_vector``.

    Attributes:
        kind: ``"maps"`` for ``render_grid``, ``"vector"`` for ``render_vector``, ``"none"``
            when it cannot be drawn.
        array: ``(C, H, W)`` float32 for maps, ``(C,)`` float32 for a vector, None otherwise
            (and always None from :func:`plan_layout`).
        layout: What was decided: ``"nchw"``, ``"nhwc"``, ``"tokens"``, ``"windows"``,
            ``"vector"`` or ``"none"``.
        note: A short sentence for the picture's legend and the manifest (what was dropped,
            reshaped or inferred), or why nothing was drawn.
    """

    kind: Literal["maps", "vector", "none"]
    array: FloatArray | None
    layout: str
    note: str | None

    @property
    def drawn_shape(self) -> tuple[int, ...] | None:
        """The shape of ``array`` when there is one."""
        return None if self.array is None else tuple(self.array.shape)


# --------------------------------------------------------------------------------------------
# Deciding


@dataclass(frozen=True)
class _Plan:
    kind: Literal["maps", "vector", "none"]
    layout: str
    note: str | None
    convert: Callable[[FloatArray], FloatArray] | None = None


def plan_layout(
    shape: Sequence[int], ctx: LayerContext | None, *, layout: Layout = "auto"
) -> Drawable:
    """Decide how an output of this per-image shape would be drawn, from the shape alone.

    This is the decision :func:`to_drawable` makes, without touching values, so it works for
    shape-only captures (``keep_tensors=False``, the ``meta`` device) such as a layer listing.

    Args:
        shape: One image's shape, without the batch dimension.
        ctx: What is known about the module (from :func:`layer_contexts`), or None.
        layout: ``auto``, or a forced ``nchw``, ``nhwc`` or ``tokens``.

    Returns:
        A :class:`Drawable` whose ``array`` is None.

    Raises:
        UsageError: If ``layout`` is not one of ``auto``, ``nchw``, ``nhwc``, ``tokens``.
    """
    plan = _decide(tuple(int(n) for n in shape), ctx, _check_layout(layout))
    return Drawable(plan.kind, None, plan.layout, plan.note)


def to_drawable(
    sample: torch.Tensor | npt.ArrayLike,
    ctx: LayerContext | None,
    *,
    layout: Layout = "auto",
) -> Drawable:
    """Turn one image's slice of a layer output into maps, a vector, or a reason.

    Never raises for a shape or dtype it cannot draw: that gives ``kind="none"`` and the
    reason in ``note``, so every output is accounted for.

    Args:
        sample: One image's output, without the batch dimension (a tensor or an array).
        ctx: What is known about the module (from :func:`layer_contexts`), or None.
        layout: ``auto`` decides from the module and the shape; ``nchw``, ``nhwc`` and
            ``tokens`` force an interpretation (one that does not fit gives ``"none"``).

    Returns:
        The drawable array and what was decided.

    Raises:
        UsageError: If ``layout`` is not one of ``auto``, ``nchw``, ``nhwc``, ``tokens``.

    Example:
        >>> d = to_drawable(acts["encoder.layers.encoder_layer_0"][0], ctx)
        >>> d.kind, d.array.shape, d.note
        ('maps', (768, 14, 14), 'class token dropped; 196 patch tokens as 14 x 14')
    """
    chosen = _check_layout(layout)
    array, refusal = _as_float_array(sample)
    if array is None:
        return Drawable("none", None, "none", refusal)
    plan = _decide(tuple(array.shape), ctx, chosen)
    if plan.kind == "none":
        return Drawable("none", None, "none", plan.note)
    out = plan.convert(array) if plan.convert is not None else array
    return Drawable(plan.kind, np.ascontiguousarray(out, dtype=np.float32), plan.layout, plan.note)


def _check_layout(layout: str) -> Layout:
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout '{layout}'; use one of {', '.join(LAYOUTS)}")
    return cast(Layout, layout)


def _as_float_array(sample: object) -> tuple[FloatArray | None, str | None]:
    """The sample as a float32 array (a view when it already is one), or None and why not."""
    if hasattr(sample, "detach") and hasattr(sample, "is_floating_point"):
        tensor = sample.detach()
        dtype = str(tensor.dtype).removeprefix("torch.")
        if tensor.is_complex():
            return None, f"complex ({dtype}) output; draw its abs() or real part instead"
        if not tensor.is_floating_point():
            return None, _integer_reason(dtype)
        if tensor.device.type == "meta":
            return None, "a meta tensor has shapes but no values"
        return tensor.to(device="cpu").float().numpy(), None
    array = np.asarray(sample)
    if array.dtype.kind == "c":
        return None, f"complex ({array.dtype}) output; draw its abs() or real part instead"
    if array.dtype.kind in "biu":
        return None, _integer_reason(str(array.dtype))
    if array.dtype.kind != "f":
        return None, f"{array.dtype} output is not numeric"
    return array.astype(np.float32, copy=False), None


def _integer_reason(dtype: str) -> str:
    return f"{dtype} output holds indices or a mask, not activations; nothing to draw as maps"


def _decide(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    if 0 in shape:
        return _Plan("none", "none", f"empty output {shape}")
    if len(shape) == 0:
        return _Plan("none", "none", "one number per image (shape ()); nothing to draw")
    if len(shape) == 1:
        # A vector has no layout to force, so a forced layout still draws a run's head.
        return _Plan("vector", "vector", None)
    if len(shape) == 2:
        return _decide_2d(shape, ctx, layout)
    if len(shape) == 3:
        return _decide_3d(shape, ctx, layout)
    return _Plan(
        "none",
        "none",
        f"{len(shape)}-D output {shape} per image (a volume or sequence of maps); "
        "select a layer with (C, H, W) output",
    )


def _decide_3d(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    a, b, c = shape
    if layout == "nchw":
        return _Plan("maps", "nchw", None)
    if layout == "nhwc":
        return _nhwc(shape, "forced by --layout nhwc")
    if layout == "tokens":
        return _Plan(
            "none",
            "none",
            f"--layout tokens needs (N, C) tokens per image, not {shape}; "
            "use --layout auto, nchw or nhwc",
        )
    if ctx is None:
        return _Plan("maps", "nchw", None)
    if ctx.windows is not None:
        windowed = _windows(shape, ctx.windows)
        if windowed is not None:
            return windowed
    hint = ctx.channels_hint
    first = hint is not None and a == hint
    last = hint is not None and c == hint
    if last and not first:
        return _nhwc(shape, f"its last dimension is the module's {hint} channels")
    if first and not last:
        return _Plan("maps", "nchw", None)
    if ctx.channels_last is True:
        return _nhwc(shape, "the model works channels-last here")
    if ctx.channels_last is False:
        return _Plan("maps", "nchw", None)
    return _Plan(
        "maps",
        "nchw",
        f"layout of {shape} is ambiguous; drawn channels-first, use --layout nhwc "
        "if channels are last",
    )


def _nhwc(shape: tuple[int, ...], why: str) -> _Plan:
    h, w, c = shape
    return _Plan(
        "maps",
        "nhwc",
        f"channels-last {shape} drawn as {c} maps of {h} x {w} ({why})",
        lambda x: x.transpose(2, 0, 1),
    )


def _windows(shape: tuple[int, ...], windows: tuple[int, int, int, bool]) -> _Plan | None:
    rows, cols, side, swapped = windows
    n_windows, n_tokens = (shape[1], shape[0]) if swapped else (shape[0], shape[1])
    if n_windows != rows * cols or n_tokens != side * side:
        return None
    c = shape[2]

    def convert(x: FloatArray) -> FloatArray:
        if swapped:
            x = x.transpose(1, 0, 2)
        # The inverse of the partition: (rows, cols, side, side, C) -> (C, rows*side, cols*side).
        x = x.reshape(rows, cols, side, side, c).transpose(4, 0, 2, 1, 3)
        return x.reshape(c, rows * side, cols * side)

    note = (
        f"partitioned tokens {shape} reassembled into {c} maps of {rows * side} x {cols * side} "
        f"({rows * cols} windows of {side} x {side})"
    )
    return _Plan("maps", "windows", note, convert)


def _decide_2d(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    n, c = shape
    if layout in ("nchw", "nhwc"):
        return _Plan(
            "none",
            "none",
            f"--layout {layout} needs (C, H, W) per image, not {shape}; "
            "use --layout tokens or auto",
        )
    hint = ctx.channels_hint if ctx is not None else None
    if layout == "auto" and hint is not None and n == hint and c != hint:
        # A 1-D feature map (Conv1d, BatchNorm1d): channels first, one strip per channel.
        return _Plan(
            "maps",
            "nchw",
            f"1-D maps {shape} drawn as {n} strips of 1 x {c}",
            lambda x: x[:, None, :],
        )
    if layout == "auto" and n == 1:
        return _Plan("vector", "vector", f"one token {shape} drawn as a vector", lambda x: x[0])
    grid = ctx.token_grid if ctx is not None else None
    prefix = ctx.prefix_tokens if ctx is not None else 0
    # Without a known grid, a square token count is only trusted when the module does not
    # say its channels are something else: a (H, W) mask or map is not a token sequence.
    guess = grid is None and (hint is None or hint == c)
    tokens = _token_plan(shape, grid, prefix, guess=guess)
    if tokens is not None:
        return tokens
    if layout == "tokens":
        return _Plan(
            "maps",
            "tokens",
            f"{shape} fits no patch grid; drawn as one {n} x {c} map (rows are tokens)",
            lambda x: x[None],
        )
    if grid is not None:
        expected = f"{prefix} + {grid[0]} x {grid[1]}" if prefix else f"{grid[0]} x {grid[1]}"
        why = f"does not fit the model's {expected} patch tokens"
    else:
        why = "is not a token sequence of a known patch grid"
    return _Plan(
        "none",
        "none",
        f"2-D output {shape} {why}; use --layout tokens to draw it as one {n} x {c} map",
    )


def _token_plan(
    shape: tuple[int, ...], grid: tuple[int, int] | None, prefix: int, *, guess: bool
) -> _Plan | None:
    n, c = shape
    inferred = False
    candidates: list[tuple[int, tuple[int, int]]] = []
    if grid is not None:
        candidates = [(prefix, grid)] + ([(0, grid)] if prefix else [])
    elif guess:
        # No patch grid is known: a perfect square after the known prefix (or after one
        # leading class token when none is known) is taken as the grid, and the note says so.
        inferred = True
        for skip in dict.fromkeys([prefix, *([1] if prefix == 0 else [])]):
            side = math.isqrt(max(n - skip, 0))
            if side >= 2 and side * side == n - skip:
                candidates.append((skip, (side, side)))
    for skip, (rows, cols) in candidates:
        if n != skip + rows * cols:
            continue
        dropped = _dropped(skip, inferred=inferred and skip > 0 and skip != prefix)
        note = f"{dropped}{rows * cols} patch tokens as {rows} x {cols}"
        if inferred:
            note += " (grid inferred from the token count)"

        def convert(
            x: FloatArray, skip: int = skip, rows: int = rows, cols: int = cols
        ) -> FloatArray:
            return x[skip:].reshape(rows, cols, c).transpose(2, 0, 1)

        return _Plan("maps", "tokens", note, convert)
    return None


def _dropped(skip: int, *, inferred: bool) -> str:
    if skip == 0:
        return ""
    if inferred:
        return "first token dropped (taken for a class token); "
    return "class token dropped; " if skip == 1 else f"{skip} prefix tokens dropped; "


# --------------------------------------------------------------------------------------------
# What the structure says


#: Modules whose output is channels-first by contract (they only accept ``(N, C, *)``).
_CHANNELS_FIRST_TYPES = (
    frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"})
    | frozenset({"ConvTranspose3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"})
    | frozenset({"FrozenBatchNorm2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"})
    | frozenset({"GroupNorm", "LayerNorm2d", "LocalResponseNorm", "Dropout2d", "Upsample"})
    | frozenset({"MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveMaxPool2d"})
    | frozenset({"AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "PixelShuffle", "PixelUnshuffle"})
    | frozenset({"UpsamplingBilinear2d", "UpsamplingNearest2d", "WindowDepartition"})
)
_CHANNELS_LAST_DIMS = (0, 2, 3, 1)
_CHANNELS_FIRST_DIMS = (0, 3, 1, 2)


def layer_contexts(
    model: nn.Module, input_hw: tuple[int, int] | None = None
) -> dict[str, LayerContext]:
    """What the structure of a model says about each module; no forward pass.

    Walks the modules once: channel counts from their attributes, channels-last regions from
    ``Permute`` modules and channels-first layers in registration order, patch grids of
    ViT-like models (a ``patch_size`` attribute or a ``conv_proj``/``patch_embed`` convolution
    whose stride equals its kernel), class/distillation/register tokens, and MaxViT's window
    partitions.

    Args:
        model: Any ``nn.Module`` (its parameters may live on the ``meta`` device).
        input_hw: The input's height and width, for the patch grid; None uses the model's
            ``image_size`` when it has one.

    Returns:
        Qualified module name (as in ``model.named_modules()``; ``""`` is the model) ->
        its :class:`LayerContext`.
    """
    modules = list(model.named_modules())
    own_hint = {name: _own_channels(module) for name, module in modules}
    leaves = {name for name, module in modules if next(iter(module.children()), None) is None}

    # Registration order stands in for data flow: a module inherits the layout set by the
    # last channels-first layer or Permute before it, and a container takes the state of its
    # last leaf. Shape evidence (the channel hint) is checked first, so this only breaks ties.
    state: bool | None = None
    last_state: dict[str, bool | None] = {}
    last_hint: dict[str, int] = {}
    for name, module in modules:
        if name not in leaves:
            continue
        state = _layout_after(module, state)
        hint = own_hint[name]
        for owner in _self_and_ancestors(name):
            last_state[owner] = state
            if hint is not None:
                last_hint[owner] = hint

    tokens = _token_regions(modules, input_hw)
    windows = _window_regions(modules)
    contexts: dict[str, LayerContext] = {}
    for name, module in modules:
        hint = own_hint[name]
        grid, prefix = _innermost(tokens, name)
        contexts[name] = LayerContext(
            module_type=type(module).__name__,
            channels_hint=hint if hint is not None else last_hint.get(name),
            token_grid=grid,
            prefix_tokens=prefix,
            channels_last=last_state.get(name),
            windows=windows.get(name),
        )
    return contexts


def _self_and_ancestors(name: str) -> list[str]:
    parts = name.split(".") if name else []
    return ["", *(".".join(parts[: i + 1]) for i in range(len(parts)))]


def _type_names(module: object) -> set[str]:
    return {cls.__name__ for cls in type(module).__mro__}


def _layout_after(module: nn.Module, state: bool | None) -> bool | None:
    """The layout (True: channels-last) of the data after this module, given the one before."""
    names = _type_names(module)
    if "Permute" in names:
        dims = tuple(getattr(module, "dims", ()))
        if dims == _CHANNELS_LAST_DIMS:
            return True
        if dims == _CHANNELS_FIRST_DIMS:
            return False
        return None
    if "WindowPartition" in names:
        return None
    if type(module).__name__ in _CHANNELS_FIRST_TYPES or names & {"_ConvNd", "_BatchNorm"}:
        return False
    return state


def _own_channels(module: nn.Module) -> int | None:
    """The channel count a module's own attributes state, if any."""
    for attr in ("out_channels", "out_features", "num_features", "num_channels"):
        value = getattr(module, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    shape = getattr(module, "normalized_shape", None)
    if isinstance(shape, (tuple, list)) and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0]
    # embed_dim is the output width of attention and embedding layers, but a whole model may
    # carry one too (and end in a classifier), so only those layers' own value counts.
    if _type_names(module) & {"MultiheadAttention", "Embedding"}:
        for attr in ("embed_dim", "embedding_dim"):
            value = getattr(module, attr, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def _innermost(
    regions: dict[str, tuple[tuple[int, int] | None, int]], name: str
) -> tuple[tuple[int, int] | None, int]:
    """The token grid of the closest ViT-like module enclosing ``name`` (itself included)."""
    for owner in reversed(_self_and_ancestors(name)):
        if owner in regions:
            return regions[owner]
    return None, 0


def _token_regions(
    modules: list[tuple[str, nn.Module]], input_hw: tuple[int, int] | None
) -> dict[str, tuple[tuple[int, int] | None, int]]:
    """ViT-like modules -> (patch grid, prefix tokens), inherited by their descendants."""
    regions: dict[str, tuple[tuple[int, int] | None, int]] = {}
    for name, module in modules:
        patch = _patch_size(module)
        prefix = _prefix_tokens(module)
        if patch is None and prefix == 0:
            continue
        hw = input_hw if input_hw is not None else _as_pair(getattr(module, "image_size", None))
        grid = None
        if patch is not None and hw is not None:
            grid = (hw[0] // patch[0], hw[1] // patch[1])
            if min(grid) < 1:
                grid = None
        regions[name] = (grid, prefix)
    return regions


def _patch_size(module: nn.Module) -> tuple[int, int] | None:
    children = dict(module.named_children())
    embed = children.get("patch_embed")
    candidates = [children.get("conv_proj"), getattr(embed, "proj", None) if embed else None]
    for conv in candidates:
        if conv is not None and "_ConvNd" in _type_names(conv):
            stride = _as_pair(getattr(conv, "stride", None))
            if stride is not None and stride == _as_pair(getattr(conv, "kernel_size", None)):
                return stride
    if candidates[0] is not None or candidates[1] is not None or _prefix_tokens(module):
        # Only trust a bare patch_size attribute on a module that also looks like a ViT.
        return _as_pair(getattr(module, "patch_size", None))
    return None


def _prefix_tokens(module: nn.Module) -> int:
    count = 0
    for attr in ("class_token", "cls_token", "dist_token", "register_tokens", "reg_token"):
        value = getattr(module, attr, None)
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 2:
            count += int(shape[-2])
    return count


def _as_pair(value: object) -> tuple[int, int] | None:
    if isinstance(value, int) and value > 0:
        return (value, value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    return None


def _window_regions(
    modules: list[tuple[str, nn.Module]],
) -> dict[str, tuple[int, int, int, bool]]:
    """Modules inside MaxViT-style partition attention -> how their tokens are windowed."""
    regions: dict[str, tuple[int, int, int, bool]] = {}
    for name, module in modules:
        side = getattr(module, "p", None)
        grid = _as_pair(getattr(module, "grid_size", None))
        kind = getattr(module, "partition_type", None)
        if not isinstance(side, int) or grid is None or kind not in ("window", "grid"):
            continue
        rows, cols = grid[0] // side, grid[1] // side
        swapped = kind == "grid"
        for sub, _ in module.named_modules():
            top = sub.split(".")[0]
            # The layer itself and its departition op give ordinary (C, H, W) maps; the
            # partition op and the swap back give windows in their unswapped order.
            if not sub or top == "departition_op":
                continue
            unswapped = top in ("partition_op", "departition_swap")
            full = f"{name}.{sub}" if name else sub
            regions[full] = (rows, cols, side, swapped and not unswapped)
    return regions


# --------------------------------------------------------------------------------------------
# Default layers


def default_selector(model: nn.Module) -> str:
    """A ``--layers`` selector that draws something meaningful for this model family.

    Convolutions for CNNs (without auxiliary heads that never run in eval mode); the patch
    embedding and each encoder block for ViTs; the stage outputs (``features.N``) for Swin
    and ConvNeXt; the stem and each layer for MaxViT; otherwise the items of the first
    numbered block list, or every leaf module.

    Args:
        model: Any ``nn.Module``.

    Returns:
        A selector string for :func:`actviz.selectors.select_layers`.
    """
    from actviz.hooks import layer_refs
    from actviz.selectors import TYPE_ALIASES

    refs = layer_refs(model)
    names = {ref.name for ref in refs}
    types = {t for ref in refs for t in ref.types}
    family = _type_names(model)

    if "VisionTransformer" in family and "EncoderBlock" in types:
        return "conv_proj,EncoderBlock" if "conv_proj" in names else "EncoderBlock"
    if family & {"SwinTransformer", "ConvNeXt"} and any(
        re.fullmatch(r"features\.\d+", n) for n in names
    ):
        return r"re:^features\.\d+$"
    if "MaxVit" in family and "MaxVitLayer" in types:
        return "stem,MaxVitLayer" if "stem" in names else "MaxVitLayer"
    if any(ref.leaf and TYPE_ALIASES["conv"].intersection(ref.types) for ref in refs):
        # Auxiliary classifiers (Inception, GoogLeNet) only run in training mode.
        aux = [ref.name for ref in refs if "InceptionAux" in ref.types and _selectable(ref.name)]
        return ",".join(["conv", *(f"!{name}.*" for name in aux)])
    blocks = _numbered_blocks(model)
    if blocks is not None:
        return rf"re:^{re.escape(blocks)}\.\d+$"
    return "all"


def _selectable(name: str) -> bool:
    # The selector syntax splits on commas, and a glob would misread its own special characters.
    return not set(name) & set(",*?[]!")


def _numbered_blocks(model: nn.Module) -> str | None:
    """The first container holding two or more numbered blocks of one class."""
    for name, module in model.named_modules():
        if not name or not _selectable(name):
            continue
        children = list(module.named_children())
        if len(children) < 2 or not all(key.isdigit() for key, _ in children):
            continue
        kinds = {type(child) for _, child in children}
        if len(kinds) == 1 and next(iter(children[0][1].children()), None) is not None:
            return str(name)
    return None
