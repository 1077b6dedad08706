"""Attention maps: where a transformer's class token looks, one map per head.

``nn.MultiheadAttention`` as vision transformers call it (``need_weights=False``) never returns
its weights, so they are recomputed from the query and key it receives, with its own input
projections: ``softmax(q k^T / sqrt(d))`` per head. The class token's row, without its own
column, is its attention to the patches; on a square patch grid it becomes ``(heads, H, W)``.
torchvision's ViT puts the class token first.

timm's and Hugging Face's attention layers form the weights themselves once their fused
kernel is off: :class:`WeightsTap` says where, and turns it off only while a capture runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "WeightsTap",
    "attention_selector",
    "class_token_attention",
    "class_token_rows",
    "find_attention",
    "find_weights_tap",
]


def find_attention(module: nn.Module) -> nn.MultiheadAttention | None:
    """The module itself if it is an ``nn.MultiheadAttention``, else the first one inside it."""
    from torch import nn

    for candidate in module.modules():
        if isinstance(candidate, nn.MultiheadAttention):
            return candidate
    return None


def class_token_attention(
    attention: nn.MultiheadAttention, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[torch.Tensor | None, str | None]:
    """Each head's attention from token 0 to the other tokens, as ``(B, heads, H, W)``.

    Args:
        attention: The attention module, about to be called with ``args`` and ``kwargs``.
        args: Its positional arguments (query, key, value, ...).
        kwargs: Its keyword arguments.

    Returns:
        The maps, or None and the reason they cannot be drawn.
    """
    import torch
    import torch.nn.functional as F

    query = args[0] if args else kwargs.get("query")
    key = args[1] if len(args) > 1 else kwargs.get("key", query)
    if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
        return None, "attention called without query and key tensors"
    if query.ndim != 3:
        return None, f"unbatched attention input {tuple(query.shape)}"
    if attention.bias_k is not None or attention.add_zero_attn:
        return None, "attention with bias_k or add_zero_attn is not drawn"
    if not attention.batch_first:
        query, key = query.transpose(0, 1), key.transpose(0, 1)
    batch, tokens, embed = query.shape
    heads = attention.num_heads
    head_dim = embed // heads
    patches = tokens - 1
    side = math.isqrt(max(patches, 0))
    if patches < 1 or side * side != patches:
        return None, f"{patches} patch tokens do not form a square grid"
    if attention.in_proj_weight is not None:
        w_q, w_k = attention.in_proj_weight[:embed], attention.in_proj_weight[embed : 2 * embed]
    else:
        w_q, w_k = attention.q_proj_weight, attention.k_proj_weight
    bias = attention.in_proj_bias
    b_q, b_k = (bias[:embed], bias[embed : 2 * embed]) if bias is not None else (None, None)
    # Only the class token's query is needed: one row of the attention matrix.
    q = F.linear(query[:, :1], w_q, b_q).reshape(batch, 1, heads, head_dim).transpose(1, 2)
    k = F.linear(key, w_k, b_k).reshape(batch, -1, heads, head_dim).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        return None, "attention with a mask is not drawn"
    weights = scores.float().softmax(dim=-1)[:, :, 0, 1:]
    return weights.reshape(batch, heads, side, side), None


@dataclass(frozen=True)
class WeightsTap:
    """Where a timm or Hugging Face attention layer shows its attention weights.

    Their fused kernels (``scaled_dot_product_attention``) never form the weights; with the
    fused path turned off they compute ``softmax(q k^T / sqrt(d))`` themselves: timm passes it
    through its ``attn_drop`` module, Hugging Face's eager attention returns it beside the
    output. The tap is hooked there, with the fused path off only while a capture runs.

    Attributes:
        module: The module whose output holds the weights.
        attention: The attention layer itself (for messages).
        unfuse: Turns the fused path off and returns what turns it back on.
    """

    module: nn.Module
    attention: nn.Module
    unfuse: Callable[[], Callable[[], None]]

    @staticmethod
    def weights(output: object) -> torch.Tensor | None:
        """The ``(B, heads, N, N)`` weights in the tapped module's output, if any."""
        import torch

        items = output if isinstance(output, (tuple, list)) else (output,)
        for item in reversed(items):
            if (
                isinstance(item, torch.Tensor)
                and item.ndim == 4
                and item.shape[-1] == item.shape[-2]
            ):
                return item
        return None


def find_weights_tap(module: nn.Module) -> WeightsTap | None:
    """The first timm or Hugging Face attention layer in ``module`` (itself included)."""
    from torch import nn

    for candidate in module.modules():
        drop = getattr(candidate, "attn_drop", None)
        if hasattr(candidate, "fused_attn") and isinstance(drop, nn.Module):
            return WeightsTap(drop, candidate, _unfuse_timm(candidate))
        config = getattr(candidate, "config", None)
        if (
            type(candidate).__name__.endswith("Attention")
            and hasattr(config, "_attn_implementation")
            and not any(
                type(child).__name__.endswith("Attention") for child in candidate.children()
            )
        ):
            return WeightsTap(candidate, candidate, _eager_huggingface(config))
    return None


def _unfuse_timm(attention: nn.Module) -> Callable[[], Callable[[], None]]:
    def unfuse() -> Callable[[], None]:
        fused = attention.fused_attn
        # A plain attribute, not a parameter: setattr keeps nn.Module's typing out of it.
        setattr(attention, "fused_attn", False)  # noqa: B010

        def restore() -> None:
            setattr(attention, "fused_attn", fused)  # noqa: B010

        return restore

    return unfuse


def _eager_huggingface(config: Any) -> Callable[[], Callable[[], None]]:
    def unfuse() -> Callable[[], None]:
        chosen = config._attn_implementation
        config._attn_implementation = "eager"

        def restore() -> None:
            config._attn_implementation = chosen

        return restore

    return unfuse


def class_token_rows(
    weights: torch.Tensor, prefix: int, grid: tuple[int, int] | None
) -> tuple[torch.Tensor | None, str | None]:
    """Each head's attention from the class token (token 0) to the patch tokens after
    ``prefix`` class and register tokens, as ``(B, heads, rows, cols)``.

    Args:
        weights: ``(B, heads, N, N)`` attention weights.
        prefix: Tokens before the patches (class, distillation, register tokens).
        grid: The patch grid when known; else a square one is required.
    """
    patches = int(weights.shape[-1]) - prefix
    if prefix < 1:
        return None, "the model has no class token to read attention from"
    if grid is None or grid[0] * grid[1] != patches:
        side = math.isqrt(max(patches, 0))
        if patches < 1 or side * side != patches:
            return None, f"{patches} patch tokens do not form a square grid"
        grid = (side, side)
    rows = weights[:, :, 0, prefix:].float()
    return rows.reshape(rows.shape[0], rows.shape[1], grid[0], grid[1]), None


def attention_selector(model: nn.Module) -> str:
    """A ``--layers`` selector for the model's attention layers: ``MultiheadAttention``
    (torchvision), or the class names of timm's and Hugging Face's attention layers."""
    if find_attention(model) is not None:
        return "MultiheadAttention"
    names: list[str] = []
    for module in model.modules():
        tap = find_weights_tap(module)
        if tap is not None and tap.attention is module:
            names.append(type(module).__name__)
    return ",".join(dict.fromkeys(names)) or "MultiheadAttention"
