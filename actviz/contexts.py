"""What a model's structure says about each module, for deciding how to draw its output.

:func:`layer_contexts` walks a model's modules once, without a forward pass, and records for
each one a :class:`LayerContext`: the channel count its attributes state, whether the model
works channels-last there (``Permute`` modules, channels-first layers in registration order),
the patch grid and prefix tokens of a ViT-like model around it, and MaxViT's window
partitions (torchvision's; timm's and Hugging Face's windowed attention is reassembled when
captured, :mod:`actviz.windows`, and is channels-last here). :mod:`actviz.layouts`
combines this with an output's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from actviz.windows import windowed_blocks

if TYPE_CHECKING:
    from torch import nn

__all__ = ["LayerContext", "layer_contexts", "type_names"]


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
    clip_grid: tuple[int, int, int] | None = None
    """For a video transformer's token outputs (MViT), the ``(T, H, W)`` grid of its patch
    tokens at the first stage; later stages pool H and W (never T) by powers of 2."""
    frames: bool = False
    """The model's outputs may hold a time axis, ``(C, T, H, W)`` per input: a video model
    (3-D layers) or an optical-flow model (its encoder sees both pictures of a pair)."""


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
    # A container's channels are those of its last leaf that makes channels (a convolution,
    # a linear layer), else of its last norm: a norm keeps its input's width, so one of
    # another width registered after the last maker normalizes that maker's input (Swin's
    # PatchMerging: the reduction to 2C is registered before the norm over 4C).
    state: bool | None = None
    last_state: dict[str, bool | None] = {}
    last_hint: dict[str, int] = {}
    made: set[str] = set()
    for name, module in modules:
        if name not in leaves:
            continue
        state = _layout_after(module, state)
        hint = own_hint[name]
        makes = hint is not None and not _is_norm(module)
        for owner in _self_and_ancestors(name):
            last_state[owner] = state
            if hint is not None and (makes or owner not in made):
                last_hint[owner] = hint
            if makes:
                made.add(owner)

    tokens = _token_regions(modules, input_hw)
    windows = _window_regions(modules)
    clips = _clip_grids(modules)
    # A model that says it takes clips or pairs (``model.actviz_family``, read by
    # actviz.models.families) has frames however its layers look.
    declared = str(getattr(model, "actviz_family", "")).replace("-", "_")
    frames = (
        bool(type_names(model) & {"RAFT"})
        or declared in ("video", "optical_flow")
        or any(type(module).__name__.endswith("3d") for _, module in modules)
    )
    # Windowed attention's rows are put back into each image's grid, channels last
    # (actviz.windows), whatever layer came before.
    for name, (block, inside) in windowed_blocks(model).items():
        if inside:
            last_state[name] = block.family != "maxvit-2d"
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
            clip_grid=next((g for owner, g in clips.items() if _inside(name, owner)), None),
            frames=frames,
        )
    return contexts


def _inside(name: str, owner: str) -> bool:
    return not owner or name == owner or name.startswith(owner + ".")


def _clip_grids(modules: list[tuple[str, nn.Module]]) -> dict[str, tuple[int, int, int]]:
    """Models whose positional encoding states the ``(T, H, W)`` token grid (torchvision's
    MViT: ``temporal_size`` and ``spatial_size``) -> that grid, for all their modules."""
    grids: dict[str, tuple[int, int, int]] = {}
    for name, module in modules:
        t = getattr(module, "temporal_size", None)
        hw = _as_pair(getattr(module, "spatial_size", None))
        if isinstance(t, int) and t > 0 and hw is not None:
            grids[name.rpartition(".")[0]] = (t, hw[0], hw[1])
    return grids


def _self_and_ancestors(name: str) -> list[str]:
    parts = name.split(".") if name else []
    return ["", *(".".join(parts[: i + 1]) for i in range(len(parts)))]


def type_names(module: object) -> set[str]:
    """The names of a module's class and of all its base classes."""
    return {cls.__name__ for cls in type(module).__mro__}


def _layout_after(module: nn.Module, state: bool | None) -> bool | None:
    """The layout (True: channels-last) of the data after this module, given the one before."""
    names = type_names(module)
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


def _is_norm(module: nn.Module) -> bool:
    """A normalization layer: its channel count is its input's, not one it makes."""
    return any(hasattr(module, attr) for attr in ("normalized_shape", "num_features")) or (
        "GroupNorm" in type_names(module)
    )


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
    if type_names(module) & {"MultiheadAttention", "Embedding"}:
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
    # Hugging Face keeps the patch projection and the class token in an ``embeddings`` child
    # of the model they feed: the model's encoder sees the same grid and prefix.
    for name, _module in modules:
        child = f"{name}.embeddings" if name else "embeddings"
        if child in regions and name not in regions:
            regions[name] = regions[child]
    return regions


def _patch_size(module: nn.Module) -> tuple[int, int] | None:
    children = dict(module.named_children())
    embed = children.get("patch_embed")
    embeddings = children.get("patch_embeddings")  # Hugging Face's name for it
    candidates = [
        children.get("conv_proj"),
        getattr(embed, "proj", None) if embed else None,
        getattr(embeddings, "projection", None) if embeddings else None,
    ]
    for conv in candidates:
        if conv is not None and "_ConvNd" in type_names(conv):
            stride = _as_pair(getattr(conv, "stride", None))
            if stride is not None and stride == _as_pair(getattr(conv, "kernel_size", None)):
                return stride
    if any(conv is not None for conv in candidates) or _prefix_tokens(module):
        # Only trust a bare patch_size attribute on a module that also looks like a ViT.
        return _as_pair(getattr(module, "patch_size", None))
    return None


def _prefix_tokens(module: nn.Module) -> int:
    # timm models state their class, distillation and register tokens in one number.
    stated = getattr(module, "num_prefix_tokens", None)
    if isinstance(stated, int) and not isinstance(stated, bool) and stated >= 0:
        return stated
    count = 0
    for attr in _PREFIX_TOKENS:
        value = getattr(module, attr, None)
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 2:
            count += int(shape[-2])
    return count


#: Parameters holding tokens that precede the patch tokens (torchvision, timm, transformers).
_PREFIX_TOKENS = (
    "class_token",
    "cls_token",
    "dist_token",
    "distillation_token",
    "register_tokens",
    "reg_token",
)


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
