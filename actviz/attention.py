"""Attention maps: where a transformer's class token looks, one map per head.

``nn.MultiheadAttention`` as vision transformers call it (``need_weights=False``) never returns
its weights, so they are recomputed from the query and key it receives, with its own input
projections: ``softmax(q k^T / sqrt(d))`` per head. The class token's row, without its own
column, is its attention to the patches; on a square patch grid it becomes ``(heads, H, W)``.
torchvision's ViT puts the class token first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["class_token_attention", "find_attention"]


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
