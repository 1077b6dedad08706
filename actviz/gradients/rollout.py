"""Attention rollout (Abnar & Zuidema, 2020) and gradient rollout (as jacobgil/vit-explain) for
vision transformers: torchvision's, timm's and Hugging Face's.

Each block's attention ``A`` (``(B, heads, N, N)``) is fused over its heads (mean, max or min;
gradient rollout: the mean of ``A`` times its gradient, negatives set to 0), optionally the
lowest ``discard_ratio`` of it set to 0 (never the class token's own weight), then mixed with
the residual, ``(A + I) / 2``, its rows renormalized to sum to 1, and the blocks multiplied
from the first to the last: ``R = A_L ... A_1``. The map is the class token's row of ``R`` over
the patch tokens. Every row of ``R`` sums to 1; the largest deviation is the axiom.

Where the weights come from, for the run only (a context that undoes it, failed or not, and a
note that says it):

- torchvision's ``nn.MultiheadAttention`` is called with ``need_weights=False``; it is asked for
  its per-head weights instead. Those weights are a copy the output is not computed from, so
  their gradient is derived: for each head ``O_h = A_h V_h``, so
  ``dF/dA_h = dF/dO_h V_h^T``, with ``dF/dO`` from the gradient of the module's output through
  its output projection.
- timm's ``Attention`` computes the weights only with its fused kernel off (``fused_attn``,
  vit-explain#23: with it on, rollout silently sees nothing); they are read where they pass
  ``attn_drop``.
- Hugging Face's attention returns its weights beside its output under the eager
  implementation, set for the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.attention import find_weights_tap
from actviz.errors import ModelError, UsageError
from actviz.gradients.attribution import Attribution, AttributionJob
from actviz.gradients.core import zero_classifier
from actviz.hooks import HookSession
from actviz.layouts import layer_contexts

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "AttentionRecorder",
    "attention_modules",
    "attention_rollout",
    "gradient_rollout",
    "rollout_matrix",
]

#: What each kind of attention needed for the run, as the record and the notes say it.
SOURCES = {
    "torchvision": (
        "nn.MultiheadAttention asked for its per-head weights (need_weights=True, "
        "average_attn_weights=False) for the run"
    ),
    "timm": "timm's fused attention turned off (fused_attn=False) for the run, then restored",
    "huggingface": (
        "Hugging Face attention run with the eager implementation for the run, then restored"
    ),
}


def attention_modules(model: nn.Module) -> list[tuple[str, str]]:
    """``(name, kind)`` of every attention layer of ``model`` in registration order; the kind
    is ``torchvision``, ``timm`` or ``huggingface`` (a key of :data:`SOURCES`)."""
    from torch import nn

    found: list[tuple[str, str]] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.MultiheadAttention):
            found.append((name, "torchvision"))
            continue
        if any(name.startswith(f"{owner}.") for owner, _ in found):
            continue
        tap = find_weights_tap(module)
        if tap is not None and tap.attention is module:
            found.append((name, "timm" if hasattr(module, "fused_attn") else "huggingface"))
    return found


@dataclass
class _Block:
    """One attention call of the latest forward: its weights, and what the gradient of the
    weights is taken from (``target``, whose gradient ``derive`` turns into the weights')."""

    weights: torch.Tensor
    target: torch.Tensor
    derive: Callable[[torch.Tensor], torch.Tensor] | None = None


class AttentionRecorder(HookSession):
    """The attention weights of every attention layer named, per call, live (in the graph,
    for their gradient); each kind of attention forms them as the module docstring says, for
    the block only."""

    def __init__(self, model: nn.Module, layers: Sequence[tuple[str, str]]) -> None:
        super().__init__(model, [name for name, _ in layers])
        self.kinds = dict(layers)
        self.blocks: list[_Block] = []

    def _start_record(self) -> None:
        super()._start_record()
        self.blocks = []

    def _close(self) -> None:
        super()._close()
        self.blocks = []

    def _register(self, name: str, module: nn.Module) -> None:
        kind = self.kinds[name]
        if kind == "torchvision":
            self._register_torchvision(module)
            return

        tap = find_weights_tap(module)
        if tap is None:  # pragma: no cover - attention_modules found it
            raise ModelError(f"{name} shows no attention weights")
        self._undo_on_exit(tap.unfuse())

        def weights_hook(_module: nn.Module, _args: object, output: object) -> None:
            weights = tap.weights(output)
            if weights is None:
                raise ModelError(f"{name} returned no attention weights; rollout cannot read it")
            self.blocks.append(_Block(weights, weights))

        self._add_forward_hook(tap.module, weights_hook)

    def _register_torchvision(self, module: nn.Module) -> None:
        def ask(
            _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return args, {**kwargs, "need_weights": True, "average_attn_weights": False}

        def keep(
            _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
        ) -> None:
            value = args[2] if len(args) > 2 else kwargs.get("value", args[0])
            output, weights = out[0], out[1]
            self.blocks.append(_Block(weights, output, _head_gradient(module, value)))

        self._add_pre_hook(module, ask, with_kwargs=True)
        self._add_forward_hook(module, keep, with_kwargs=True)


def _head_gradient(
    attention: nn.Module, value: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """For an ``nn.MultiheadAttention`` called with ``value``: the gradient of the weights from
    the gradient of the module's output (see the module docstring)."""
    import torch.nn.functional as F

    def derive(grad_output: torch.Tensor) -> torch.Tensor:
        mha: Any = attention
        embed, heads = int(mha.embed_dim), int(mha.num_heads)
        v_in, g_out = value, grad_output
        if not mha.batch_first:
            v_in, g_out = v_in.transpose(0, 1), g_out.transpose(0, 1)
        if mha.in_proj_weight is not None:
            w_v = mha.in_proj_weight[2 * embed :]
        else:
            w_v = mha.v_proj_weight
        b_v = mha.in_proj_bias[2 * embed :] if mha.in_proj_bias is not None else None
        batch, tokens = int(v_in.shape[0]), int(v_in.shape[1])
        v = F.linear(v_in.detach(), w_v.detach(), None if b_v is None else b_v.detach())
        v = v.reshape(batch, tokens, heads, embed // heads).transpose(1, 2)
        g = (g_out @ mha.out_proj.weight.detach()).reshape(batch, -1, heads, embed // heads)
        weights_grad: torch.Tensor = g.transpose(1, 2) @ v.transpose(-2, -1)
        return weights_grad

    return derive


def rollout_matrix(
    weights: Sequence[torch.Tensor],
    *,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    gradients: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """``(B, N, N)``: the blocks' fused attention mixed with the residual and multiplied from
    the first block to the last, in float64 (see the module docstring).

    Raises:
        ValueError: For an unknown head fusion, or weights of different shapes.
    """
    import torch

    if not weights:
        raise ValueError("rollout needs the attention of at least one block")
    batch, _, tokens, _ = weights[0].shape
    eye = torch.eye(tokens, dtype=torch.float64, device=weights[0].device)
    result = eye.expand(batch, tokens, tokens).clone()
    for j, a in enumerate(weights):
        a = a.detach().double()
        if tuple(a.shape[-2:]) != (tokens, tokens):
            raise ValueError(f"block {j}'s attention is {tuple(a.shape)}, not {tokens} tokens")
        if gradients is not None:
            fused = (a * gradients[j].detach().double()).mean(dim=1).clamp(min=0)
        elif head_fusion == "mean":
            fused = a.mean(dim=1)
        elif head_fusion == "max":
            fused = a.amax(dim=1)
        elif head_fusion == "min":
            fused = a.amin(dim=1)
        else:
            raise ValueError(f"head_fusion must be mean, max or min, got {head_fusion!r}")
        if discard_ratio > 0:
            flat = fused.reshape(batch, -1).clone()
            count = int(flat.shape[1] * discard_ratio)
            lowest = flat.topk(count, dim=1, largest=False).indices
            keep_first = lowest != 0  # never the class token's attention to itself
            rows = torch.arange(batch, device=flat.device)[:, None].expand_as(lowest)
            flat[rows[keep_first], lowest[keep_first]] = 0
            fused = flat.view(batch, tokens, tokens)
        mixed = (fused + eye) / 2
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        result = mixed @ result
    return result


def _layout(model: nn.Module, size: tuple[int, int], tokens: int) -> tuple[int, tuple[int, int]]:
    """The class/register tokens before the patches, and the patch grid, for ``tokens``
    tokens at input ``size``.

    Raises:
        UsageError: When the tokens hold no class token or fit no grid.
    """

    prefix, grid = 0, None
    for ctx in layer_contexts(model, size).values():
        if ctx.token_grid is not None:
            prefix, grid = ctx.prefix_tokens, ctx.token_grid
            break
    if grid is None or prefix + grid[0] * grid[1] != tokens:
        side = math.isqrt(max(tokens - 1, 0))
        if side * side == tokens - 1:
            prefix, grid = 1, (side, side)
    if grid is None or prefix < 1 or prefix + grid[0] * grid[1] != tokens:
        raise UsageError(
            f"rollout reads the class token's row of the attention over a patch grid; the "
            f"{tokens} tokens of this model hold no class token before a patch grid"
        )
    return prefix, grid


def _rollout(job: AttributionJob, *, gradient: bool) -> Attribution:
    import torch

    layers = attention_modules(job.model)
    if not layers:
        name = type(job.model).__name__
        raise UsageError(
            f"rollout reads a vision transformer's attention, and {name} has no attention "
            "layer (torchvision, timm or Hugging Face); use ig, smoothgrad, gradxinput or lrp"
        )
    x = (job.x.clone() if job.x.is_inference() else job.x.detach()).float()
    targets = list(job.targets)
    size = (int(x.shape[-2]), int(x.shape[-1]))
    values, scores, deviations = [], [], []
    step = max(1, job.batch_size)
    for start in range(0, int(x.shape[0]), step):
        rows = x[start : start + step].clone()
        chosen = torch.tensor(targets[start : start + step], device=x.device)
        with (
            torch.inference_mode(False),
            torch.set_grad_enabled(gradient),
            AttentionRecorder(job.model, layers) as recorder,
        ):
            logits = job.model(rows.requires_grad_(gradient))
            if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
                raise ModelError("rollout needs a classifier that returns (batch, classes) logits")
            blocks = list(recorder.blocks)
            grads = None
            if gradient:
                picked = logits.gather(1, chosen[:, None]).sum()
                found = torch.autograd.grad(picked, [b.target for b in blocks], allow_unused=True)
                grads = [
                    torch.zeros_like(b.weights)
                    if g is None
                    else (b.derive(g) if b.derive is not None else g)
                    for b, g in zip(blocks, found, strict=True)
                ]
            matrix = rollout_matrix(
                [b.weights for b in blocks],
                head_fusion="mean" if gradient else job.settings.head_fusion,
                discard_ratio=job.settings.discard_ratio,
                gradients=grads,
            )
            scores += logits.detach().gather(1, chosen[:, None])[:, 0].double().cpu().tolist()
        prefix, grid = _layout(job.model, size, int(matrix.shape[-1]))
        row = matrix[:, 0, prefix:].reshape(-1, 1, grid[0], grid[1])
        values.append(row.float().cpu())
        deviations += (matrix.sum(dim=-1) - 1).abs().amax(dim=-1).cpu().tolist()
    kinds = sorted({kind for _, kind in layers})
    notes = [SOURCES[k] for k in kinds]
    if gradient and (head := zero_classifier(job.model)) is not None:
        notes.append(
            f"the classifier {head} has all-zero weights (zero-initialised, not trained), so "
            "every gradient is zero and gradient rollout sees no block"
        )
    return Attribution(
        values=torch.cat(values),
        scores=[float(s) for s in scores],
        axioms=[{"name": "row sums", "deviation": float(d)} for d in deviations],
        notes=notes,
        record={
            "attention": [SOURCES[k] for k in kinds],
            "blocks": len(layers),
            "head_fusion": "mean of weights x gradients" if gradient else job.settings.head_fusion,
            "discard_ratio": job.settings.discard_ratio,
            "residual": "(A + I) / 2, rows renormalized",
        },
    )


def attention_rollout(job: AttributionJob) -> Attribution:
    """Attention rollout: the class token's row of the product of every block's fused
    attention with the residual, over the patch grid; each image's largest deviation of a
    row sum from 1 is its axiom.

    Raises:
        UsageError: For a model without attention layers or without a class token.
    """
    return _rollout(job, gradient=False)


def gradient_rollout(job: AttributionJob) -> Attribution:
    """Gradient rollout: attention rollout of each block's attention times its gradient for
    the target (mean over heads, negatives set to 0), as jacobgil/vit-explain computes it.

    Raises:
        UsageError: For a model without attention layers or without a class token.
    """
    return _rollout(job, gradient=True)
