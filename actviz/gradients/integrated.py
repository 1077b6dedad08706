"""Gradient attributions at the input: Integrated Gradients, SmoothGrad and gradient x input.

Integrated Gradients' steps and SmoothGrad's noisy copies are rows (image, step): they are
built a chunk of ``batch_size`` rows at a time and go through one forward and backward each,
and each row's gradient is added into its image's sum at once, so memory is that of one batch
whatever the number of steps (the out-of-memory failures of captum#538 and #245 come from
stacking every step). The gradient of each row's target logit with respect to its input is
taken with ``torch.autograd.grad``, which computes no parameter gradient.

The path integral follows captum 0.9's rules and names (Gauss-Legendre by default; the
Riemann rules, the trapezoid's weights summing to 1), and its record says which; SmoothGrad
draws each image's noise from its own generator seeded with ``seed``, so the same seed gives
the same map whatever the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from actviz.errors import ModelError, UsageError
from actviz.gradients.attribution import BLUR_SIGMA, Attribution, AttributionJob

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "class_gradients",
    "gradient_x_input",
    "integrated_gradients",
    "quadrature",
    "smoothgrad",
    "target_scores",
]


def quadrature(rule: str, steps: int) -> tuple[list[float], list[float]]:
    """The points (``alphas`` in ``[0, 1]``) and weights of a path integral of ``steps``
    points, as captum's ``approximation_parameters`` gives them (but the trapezoid's weights,
    which sum to 1 here).

    Raises:
        ValueError: For an unknown rule.
    """
    if rule == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(steps)
        return (0.5 * (1 + nodes)).tolist(), (0.5 * weights).tolist()
    import torch

    deltas = [1 / steps] * steps
    if rule == "riemann_trapezoid":
        # Points 0, h, ..., 1 with h = 1/(steps - 1), the ends weighed h/2: the weights sum
        # to 1. (captum 0.9 weighs them 1/steps, ends halved, so its sum is 1 - 1/steps and
        # its trapezoid IG misses completeness by that share even on a linear model.)
        deltas = [1 / (steps - 1)] * steps
        deltas[0] /= 2
        deltas[-1] /= 2
        alphas = torch.linspace(0, 1, steps)
    elif rule == "riemann_left":
        alphas = torch.linspace(0, 1 - 1 / steps, steps)
    elif rule == "riemann_middle":
        alphas = torch.linspace(1 / (2 * steps), 1 - 1 / (2 * steps), steps)
    elif rule == "riemann_right":
        alphas = torch.linspace(1 / steps, 1, steps)
    else:
        raise ValueError(f"unknown integration rule {rule!r}")
    return [float(a) for a in alphas.tolist()], deltas


def class_gradients(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward and backward: the gradient of each row's target logit with respect to its
    input (rows do not interact in eval mode), and the logits.

    Raises:
        ModelError: If the model does not return ``(B, K)`` logits.
    """
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        # An inference tensor cannot require grad; a clone made here is a normal tensor.
        rows = (inputs.clone() if inputs.is_inference() else inputs.detach()).requires_grad_(True)
        logits = model(rows)
        if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
            raise ModelError(
                "attributions need a classifier that returns (batch, classes) logits; pick a "
                "classification model"
            )
        picked = logits.gather(1, targets[:, None]).sum()
        (grad,) = torch.autograd.grad(picked, rows)
    return grad.detach(), logits.detach()


def target_scores(
    model: nn.Module, x: torch.Tensor, targets: torch.Tensor, batch_size: int
) -> torch.Tensor:
    """Each row's target logit, forwards of ``batch_size`` rows, float64 on the CPU."""
    import torch

    out = []
    with torch.inference_mode():
        for start in range(0, int(x.shape[0]), max(1, batch_size)):
            logits = model(x[start : start + batch_size])
            picked = logits.gather(1, targets[start : start + batch_size, None])[:, 0]
            out.append(picked.double().cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def _chunks(count: int, size: int) -> Iterator[range]:
    for start in range(0, count, max(1, size)):
        yield range(start, min(count, start + max(1, size)))


def _like(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``rows`` in ``x``'s memory format (channels-last stays channels-last)."""
    import torch

    if x.ndim == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return rows.contiguous(memory_format=torch.channels_last)
    return rows


def _plain(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a float tensor autograd can use (an inference tensor is copied)."""
    return (x.clone() if x.is_inference() else x.detach()).float()


def baselines(job: AttributionJob, x: torch.Tensor) -> torch.Tensor:
    """Integrated Gradients' baseline of each image, ``(B, C, H, W)``.

    Raises:
        UsageError: For a baseline image whose shape is not the inputs'.
    """
    import torch

    name = job.settings.baseline
    if name == "zero":
        return torch.zeros_like(x)
    if name == "mean":
        return x.mean(dim=(-2, -1), keepdim=True).expand_as(x).clone()
    if name == "blur":
        from torchvision.transforms.v2.functional import gaussian_blur

        sigma = max(0.5, BLUR_SIGMA * min(int(x.shape[-2]), int(x.shape[-1])))
        kernel = 2 * math.ceil(3 * sigma) + 1
        kernel = min(kernel, 2 * (min(int(x.shape[-2]), int(x.shape[-1])) - 1) - 1)
        blurred: torch.Tensor = gaussian_blur(x, [max(1, kernel)] * 2, [sigma, sigma])
        return blurred
    if job.baseline is None:
        raise UsageError(f"--baseline {name} was not read; pass it decoded as the job's baseline")
    image = job.baseline.to(device=x.device, dtype=x.dtype)
    if tuple(image.shape) != tuple(x.shape[1:]):
        raise UsageError(
            f"--baseline {name} is {tuple(image.shape)} after preprocessing, the inputs are "
            f"{tuple(x.shape[1:])}; give an image the model's preprocessing brings to that size"
        )
    return image.expand_as(x).clone()


def integrated_gradients(job: AttributionJob) -> Attribution:
    """Integrated Gradients (Sundararajan et al., 2017):
    ``(x - x') * integral_0^1 dF(x' + a (x - x'))/dx da``, the integral by ``settings``'s rule
    over ``steps`` points; each image's completeness residual ``|sum(a) - (F(x) - F(x'))|``
    is its axiom."""
    import torch

    settings = job.settings
    x = _plain(job.x)
    base = baselines(job, x)
    diff = x - base
    alphas, weights = quadrature(settings.integration, settings.steps)
    targets = torch.tensor(list(job.targets), device=x.device, dtype=torch.long)
    total = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    steps = len(alphas)
    rows = [(i, k) for i in range(int(x.shape[0])) for k in range(steps)]
    for chunk in _chunks(len(rows), job.batch_size):
        images = [rows[r][0] for r in chunk]
        index = torch.tensor(images, device=x.device)
        a = torch.tensor([alphas[rows[r][1]] for r in chunk], dtype=x.dtype, device=x.device)
        w = torch.tensor([weights[rows[r][1]] for r in chunk], dtype=torch.float64)
        points = _like(x, base[index] + a.view(-1, 1, 1, 1) * diff[index])
        grad, _ = class_gradients(job.model, points, targets[index])
        total.index_add_(0, index, grad.double() * w.to(x.device).view(-1, 1, 1, 1))
    values = (diff.double() * total).float().cpu()
    both = _like(x, torch.cat([x, base]))
    ends = target_scores(job.model, both, torch.cat([targets, targets]), job.batch_size)
    count = int(x.shape[0])
    axioms: list[dict[str, object] | None] = []
    for i in range(count):
        score, start = float(ends[i]), float(ends[count + i])
        total_i = float(values[i].double().sum())
        residual = abs(total_i - (score - start))
        axioms.append(
            {
                "name": "completeness",
                "residual": residual,
                "relative": residual / max(abs(score - start), 1e-12),
                "sum": total_i,
                "score": score,
                "baseline_score": start,
            }
        )
    return Attribution(
        values=values,
        scores=[float(v) for v in ends[:count]],
        axioms=axioms,
        record={
            "integration": settings.integration,
            "steps": steps,
            "baseline": settings.baseline,
            "rule": "captum 0.9's points and weights (the trapezoid's summing to 1)",
        },
    )


def smoothgrad(job: AttributionJob) -> Attribution:
    """SmoothGrad (Smilkov et al., 2017): the gradient of the target logit averaged over
    ``samples`` copies of the input with Gaussian noise of standard deviation ``noise`` times
    the input's value range, drawn from a generator seeded with ``seed`` for each image."""
    import torch

    settings = job.settings
    x = _plain(job.x)
    count, samples = int(x.shape[0]), settings.samples
    targets = torch.tensor(list(job.targets), device=x.device, dtype=torch.long)
    total = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    sigmas = [settings.noise * float(x[i].max() - x[i].min()) for i in range(count)]
    noise: dict[int, torch.Tensor] = {}
    rows = [(i, s) for i in range(count) for s in range(samples)]
    for chunk in _chunks(len(rows), job.batch_size):
        images = [rows[r][0] for r in chunk]
        for i in dict.fromkeys(images):
            if i not in noise:
                generator = torch.Generator().manual_seed(settings.seed)
                drawn = torch.randn((samples, *x.shape[1:]), generator=generator) * sigmas[i]
                noise[i] = drawn.to(x.device)
        for i in [i for i in noise if i < images[0]]:
            del noise[i]  # rows run image by image: at most two images' noise is kept
        points = torch.stack([x[rows[r][0]] + noise[rows[r][0]][rows[r][1]] for r in chunk])
        index = torch.tensor(images, device=x.device)
        grad, _ = class_gradients(job.model, _like(x, points), targets[index])
        total.index_add_(0, index, grad.double())
    scores = target_scores(job.model, x, targets, job.batch_size)
    return Attribution(
        values=(total / samples).float().cpu(),
        scores=[float(v) for v in scores],
        axioms=[None] * count,
        record={"samples": samples, "noise": settings.noise, "seed": settings.seed},
    )


def gradient_x_input(job: AttributionJob) -> Attribution:
    """Gradient x input (Shrikumar et al., 2016): ``x * dF(x)/dx``; on a model linear in its
    input it equals Integrated Gradients from a zero baseline."""
    import torch

    x = _plain(job.x)
    targets = torch.tensor(list(job.targets), device=x.device, dtype=torch.long)
    grads, scores = [], []
    for chunk in _chunks(int(x.shape[0]), job.batch_size):
        index = torch.tensor(list(chunk), device=x.device)
        grad, logits = class_gradients(job.model, x[index], targets[index])
        grads.append(grad)
        scores += logits.gather(1, targets[index][:, None])[:, 0].double().cpu().tolist()
    values = (x * torch.cat(grads)).float().cpu()
    return Attribution(values=values, scores=scores, axioms=[None] * int(x.shape[0]))
