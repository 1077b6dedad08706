"""Gradients of a class score with respect to layer outputs (the hooks that take them, and
why they are taken the way they are, are in :mod:`actviz.gradients.recorder`), and why some
are zero.

The loss is the sum over images of each image's own target logit. In eval mode images do not
interact, so each image's gradient is that of its own target alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError
from actviz.gradients.recorder import GradientCapture, GradientRecorder
from actviz.hooks import Skipped

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "CLASS_TOKEN_NOTE",
    "GradientResult",
    "compute_gradients",
    "explain_zero_gradients",
    "resolve_targets",
    "zero_cam_note",
    "zero_classifier",
]

CLASS_TOKEN_NOTE = (
    "only the class token reaches the classifier: after the last attention layer the patch "
    "tokens get no gradient; pick an earlier layer (the block before the last, or the last "
    "block's ln_1)"
)
"""Why a token layer's patch gradients are zero in a model that classifies from its class
token (torchvision's ViT)."""

NO_EVIDENCE_NOTE = (
    "no positive evidence for this class at this layer: the gradient-weighted sum of its "
    "maps is nowhere above zero"
)


@dataclass
class GradientResult:
    """What :func:`compute_gradients` found for one batch.

    Attributes:
        captures: Capture key -> capture, in the order the outputs were produced (depth).
        logits: ``(B, K)`` CPU float32 model output.
        targets: The class whose logit was differentiated, per image.
        input_gradient: ``(B, C, H, W)`` CPU float32 gradient with respect to the input (a
            plain saliency map), or None when the loss does not depend on the input.
        skipped: Selected outputs that have no gradient (not a tensor, not differentiable).
        never_called: Selected modules that did not run.
    """

    captures: dict[str, GradientCapture]
    logits: torch.Tensor
    targets: list[int]
    input_gradient: torch.Tensor | None = None
    skipped: list[Skipped] = field(default_factory=list)
    never_called: list[str] = field(default_factory=list)

    @property
    def probabilities(self) -> torch.Tensor:
        """``(B, K)`` softmax of the logits."""
        return self.logits.softmax(dim=1)


def resolve_targets(
    logits: torch.Tensor, target: str | int, categories: Sequence[str] | None
) -> list[int]:
    """The class to explain for each image.

    Args:
        logits: ``(B, K)`` model output.
        target: ``top1`` (each image's own highest logit), a class index (``"281"``), or a
            class name from ``categories`` (case-insensitive, exact).
        categories: The model's class names, or None when it has none.

    Returns:
        One class index per image.

    Raises:
        UsageError: For an index out of range, an unknown or ambiguous name, or a name when
            the model has no class names.
        ModelError: If ``logits`` is not ``(B, K)``.
    """
    if logits.ndim != 2:
        raise ModelError(
            f"gradients need a classifier output of shape (batch, classes), got "
            f"{tuple(logits.shape)}; pick a classification model"
        )
    batch, classes = int(logits.shape[0]), int(logits.shape[1])
    text = str(target).strip()
    if text.lower() == "top1":
        return [int(i) for i in logits.detach().argmax(dim=1).tolist()]
    if text.lstrip("-").isdigit():
        index = int(text)
        if not 0 <= index < classes:
            raise UsageError(
                f"class index {index} is out of range for a model with {classes} classes; "
                f"use 0-{classes - 1}, a class name or top1"
            )
        return [index] * batch
    if not categories:
        raise UsageError(
            f"this model has no class names, so target {text!r} cannot be looked up; "
            f"use a class index (0-{classes - 1}) or top1"
        )
    wanted = text.casefold()
    hits = [i for i, name in enumerate(categories) if name.casefold() == wanted]
    if len(hits) == 1:
        return [hits[0]] * batch
    if hits:
        listed = ", ".join(str(i) for i in hits)
        raise UsageError(f"class name {text!r} is ambiguous (indices {listed}); pass the index")
    by_folded = {name.casefold(): name for name in categories}
    close = difflib.get_close_matches(wanted, list(by_folded), n=5, cutoff=0.6)
    hint = (
        "did you mean " + ", ".join(repr(by_folded[c]) for c in close) + "?"
        if close
        else f"use a class index (0-{classes - 1}) or top1"
    )
    raise UsageError(f"unknown class {text!r}; {hint}")


def compute_gradients(
    model: nn.Module,
    x: torch.Tensor,
    layers: Sequence[str],
    *,
    target: str | int | Sequence[int] = "top1",
    categories: Sequence[str] | None = None,
) -> GradientResult:
    """Run one batch forward and backward, and return each selected output and its gradient.

    Grad is enabled inside, even under ``torch.no_grad()`` or ``torch.inference_mode()``.

    Args:
        model: A classifier returning ``(B, K)`` logits.
        x: ``(B, C, H, W)`` input batch, on the model's device.
        layers: Qualified module names (already selected).
        target: See :func:`resolve_targets`; or an explicit class index per image.
        categories: Class names, for a target given by name.

    Returns:
        Activations and gradients as CPU float32, the logits and the targets. Nothing in it
        refers to the autograd graph.

    Raises:
        UsageError: For a bad target.
        ModelError: For a missing module or a model whose output is not ``(B, K)``.
    """
    import torch

    with torch.inference_mode(False), torch.enable_grad(), GradientRecorder(model, layers) as rec:
        # An inference tensor cannot require grad; a clone made here is a normal tensor.
        inputs = (x.clone() if x.is_inference() else x.detach()).requires_grad_(True)
        logits = model(inputs)
        if not isinstance(logits, torch.Tensor):
            raise ModelError(
                f"gradients need a model that returns one logits tensor, got "
                f"{type(logits).__name__}; pick a classification model"
            )
        targets = _targets(logits, target, categories)
        index = torch.tensor(targets, device=logits.device).unsqueeze(1)
        loss = logits.gather(1, index).sum()
        (input_grad,) = rec.backward(loss, inputs)
        return GradientResult(
            captures={c.key: c for c in rec.captures},
            logits=logits.detach().to(device="cpu", dtype=torch.float32, copy=True),
            targets=targets,
            input_gradient=(
                None if input_grad is None else input_grad.to("cpu", torch.float32, copy=True)
            ),
            skipped=rec.skipped,
            never_called=rec.never_called(),
        )


def _targets(
    logits: torch.Tensor, target: str | int | Sequence[int], categories: Sequence[str] | None
) -> list[int]:
    if isinstance(target, (str, int)):
        return resolve_targets(logits, target, categories)
    chosen = [int(t) for t in target]
    if len(chosen) != logits.shape[0]:
        raise UsageError(f"expected {logits.shape[0]} targets, one per image, got {len(chosen)}")
    for index in chosen:
        resolve_targets(logits[:1], index, None)  # the same range check and message
    return chosen


def zero_classifier(model: nn.Module) -> str | None:
    """The name of the model's classifier (its last leaf with a 2-D weight) when that weight
    is all zero, so that no logit depends on the input; None otherwise.

    torchvision zero-initialises the heads of its ViTs, so with random weights every
    gradient of a ViT is zero.
    """
    import torch

    last: tuple[str, torch.Tensor] | None = None
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        leaf = next(iter(module.children()), None) is None
        if leaf and isinstance(weight, torch.Tensor) and weight.ndim == 2:
            last = (name, weight)
    if last is None or last[1].is_meta or bool(last[1].detach().any()):
        return None
    return last[0]


def explain_zero_gradients(
    model: nn.Module, captures: Iterable[GradientCapture], contexts: Mapping[str, Any]
) -> None:
    """Set the note of each capture whose drawn gradient is all zero for some image, when
    the reason is known: the output does not reach the loss (the recorder's own note), the
    classifier's weights are all zero, or only the class token is read out (the patch
    tokens of a token layer get nothing while the class token does).

    The drawn positions are the patch tokens for a token layer, everything otherwise.
    """
    head: str | None = None
    looked = False
    for capture in captures:
        if capture.note is not None:
            continue
        ctx = contexts.get(capture.module)
        gradient = capture.gradient
        prefix = _prefix_tokens(gradient, ctx)
        drawn = gradient[:, prefix:] if prefix else gradient
        rows = drawn.reshape(drawn.shape[0], -1) if drawn.ndim else drawn.reshape(1, -1)
        if bool(rows.any(dim=1).all()):
            continue
        if not looked:
            head, looked = zero_classifier(model), True
        if head is not None:
            capture.note = (
                f"the classifier {head} has all-zero weights (zero-initialised, not trained), "
                "so no logit depends on the input"
            )
        elif prefix and bool(gradient[:, :prefix].any()):
            capture.note = CLASS_TOKEN_NOTE


def _prefix_tokens(gradient: torch.Tensor, ctx: Any) -> int:
    """How many class/register tokens lead a token layer's output (0 for other layouts)."""
    grid = getattr(ctx, "token_grid", None)
    prefix = int(getattr(ctx, "prefix_tokens", 0) or 0)
    if grid is None or not prefix or gradient.ndim != 3:
        return 0
    return prefix if gradient.shape[1] == prefix + grid[0] * grid[1] else 0


def zero_cam_note(gradient_note: str | None) -> str:
    """Why a Grad-CAM map is all zero: its gradient's note, or no positive evidence."""
    return gradient_note or NO_EVIDENCE_NOTE
