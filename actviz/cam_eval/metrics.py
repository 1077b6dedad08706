"""Faithfulness metrics of saliency maps, batched: deletion and insertion curves (Petsiuk et
al., RISE, 2018) and the change in confidence on the map-masked image (Chattopadhay et al.,
Grad-CAM++, 2018), for any maps, with the baselines every method must beat.

Every perturbed image of a batch (each image, map and step) goes through the model in chunks of
``batch_size``, on the device of the input: never one forward per step. The maps are upsampled
bilinearly to the input's size; the pixels are ranked by the map (ties by position, row-major),
and the most salient are deleted (set to the deletion substrate) or inserted (from the original
into the insertion substrate) first, ``step`` pixels at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "BASELINES",
    "BASELINE_TITLES",
    "Protocol",
    "Scores",
    "baseline_maps",
    "blurred",
    "confidence_change",
    "curve_area",
    "perturbation_curves",
    "spearman",
    "upsample_maps",
]

BASELINES = ("random", "gaussian", "sobel")
"""The maps any method must beat: a random map, a centred Gaussian and the input's edges."""
BASELINE_TITLES = {"random": "random map", "gaussian": "centred Gaussian", "sobel": "Sobel edges"}
"""How the page names each baseline."""


@dataclass(frozen=True)
class Protocol:
    """How the curves are made; recorded in ``cam-eval.json`` so numbers can be compared.

    Attributes:
        steps: Points of each curve after the first: ``ceil(H*W / steps)`` pixels per step.
        deletion_substrate: What deleted pixels become: ``zeros`` in the model's normalized
            input (the dataset's mean colour for ImageNet-normalized models).
        insertion_substrate: What the insertion curve starts from: ``blur``, the input blurred
            with a Gaussian of ``blur_kernel`` pixels and ``blur_sigma``.
        blur_kernel: Side of the Gaussian kernel, in pixels (odd).
        blur_sigma: Its standard deviation, in pixels.
        score: What each curve point measures: the softmax probability of the target class.
        gaussian_sigma: The centred-Gaussian baseline's sigma, as a fraction of the shorter side.
        seed: Seed of the random-map baseline (with the image's name).
    """

    steps: int = 32
    deletion_substrate: str = "zeros"
    insertion_substrate: str = "blur"
    blur_kernel: int = 11
    blur_sigma: float = 5.0
    score: str = "softmax probability of the target class"
    gaussian_sigma: float = 0.25
    seed: int = 0

    def describe(self, size: tuple[int, int]) -> dict[str, Any]:
        """The protocol for the record, with the step in pixels at input ``size``."""
        pixels = size[0] * size[1]
        return {**asdict(self), "input_size": list(size), "step_pixels": -(-pixels // self.steps)}


@dataclass(frozen=True)
class Scores:
    """One map's scores on a batch, per image.

    Attributes:
        deletion: ``(B, steps + 1)`` target probabilities as the most salient pixels go.
        insertion: ``(B, steps + 1)`` target probabilities as they come back.
        deletion_auc, insertion_auc: The curves' areas over the fraction of pixels, ``(B,)``.
        masked: ``(B,)`` target probability on the input times the map.
    """

    deletion: torch.Tensor
    insertion: torch.Tensor
    deletion_auc: torch.Tensor
    insertion_auc: torch.Tensor
    masked: torch.Tensor


def upsample_maps(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(B, h, w)`` maps to ``(B, H, W)``, bilinear (``align_corners=False``), float32."""
    import torch.nn.functional as F

    up = maps.float()
    if tuple(up.shape[-2:]) == tuple(size):
        return up
    return F.interpolate(up[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]


def blurred(x: torch.Tensor, kernel: int = 11, sigma: float = 5.0) -> torch.Tensor:
    """The insertion substrate: ``x`` blurred per channel by a ``kernel`` x ``kernel``
    Gaussian of ``sigma`` (RISE's), edges padded by reflection (replication when too small)."""
    import torch
    import torch.nn.functional as F

    half = kernel // 2
    t = torch.arange(kernel, dtype=torch.float64, device=x.device) - half
    g = torch.exp(-(t * t) / (2 * sigma * sigma))
    g = (g / g.sum()).to(x.dtype)
    channels = x.shape[1]
    mode = "reflect" if min(x.shape[-2:]) > half else "replicate"
    y = F.pad(x, (half, half, half, half), mode=mode)
    y = F.conv2d(y, g.view(1, 1, 1, kernel).repeat(channels, 1, 1, 1), groups=channels)
    return F.conv2d(y, g.view(1, 1, kernel, 1).repeat(channels, 1, 1, 1), groups=channels)


def curve_area(curves: torch.Tensor, fractions: torch.Tensor) -> torch.Tensor:
    """Trapezoidal area under ``(B, n)`` curves over ``(n,)`` fractions of pixels in [0, 1]."""
    widths = (fractions[1:] - fractions[:-1]).to(curves.dtype)
    return ((curves[:, 1:] + curves[:, :-1]) / 2 * widths).sum(dim=1)


def _counts(pixels: int, steps: int) -> list[int]:
    """Pixels perturbed before each point: 0, step, 2*step, ..., all of them."""
    step = -(-pixels // steps)
    return [min(i * step, pixels) for i in range(steps + 1)]


def perturbation_curves(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    maps: Mapping[str, torch.Tensor],
    targets: Sequence[int],
    protocol: Protocol,
    *,
    batch_size: int = 64,
    channels_last: bool = False,
) -> dict[str, Scores]:
    """Deletion and insertion curves and the masked-image probability of every map.

    Args:
        model: Returns ``(N, K)`` logits (already in eval mode).
        x: ``(B, C, H, W)`` model inputs on the model's device.
        maps: Name -> ``(B, h, w)`` maps in ``[0, 1]`` (upsampled here to ``(H, W)``).
        targets: Each image's class.
        protocol: Steps and substrates.
        batch_size: Perturbed images per forward.
        channels_last: Send them channels-last (for a model in that memory format: oneDNN's
            convolutions on a CPU run several times faster so).

    Returns:
        Name -> :class:`Scores`, on the CPU in float64.
    """
    import torch

    batch, _, height, width = x.shape
    pixels = height * width
    counts = _counts(pixels, protocol.steps)
    fractions = torch.tensor(counts, dtype=torch.float64) / pixels
    count_t = torch.tensor(counts, device=x.device)
    deleted = torch.zeros_like(x)
    base = blurred(x, protocol.blur_kernel, protocol.blur_sigma)
    target_t = torch.tensor(list(targets), device=x.device)
    names = list(maps)
    ups = {n: upsample_maps(maps[n].to(x.device), (height, width)).clamp(0, 1) for n in names}
    # Rank of each pixel in its map's order: 0 for the most salient (stable: ties by position).
    ranks = {}
    for n in names:
        order = torch.argsort(-ups[n].flatten(1), dim=1, stable=True)
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(pixels, device=x.device).expand(batch, -1))
        ranks[n] = rank.view(batch, 1, height, width)
    # Every perturbed input as (map, kind, image, point), built chunk by chunk. The curves'
    # ends are the same for every map of an image (the input itself, all zeros, the blurred
    # input): one forward each per image, shared.
    last = len(counts) - 1
    shared = [("", kind, i, 0) for i in range(batch) for kind in ("input", "zeros", "blur")]
    jobs = shared + [
        (n, kind, i, p)
        for n in names
        for i in range(batch)
        for kind, points in (("deletion", range(1, last)), ("insertion", range(1, last)))
        for p in points
    ]
    jobs += [(n, "masked", i, 0) for n in names for i in range(batch)]
    probs = torch.empty(len(jobs), dtype=torch.float64)
    size = max(1, batch_size)
    with torch.inference_mode():
        for start in range(0, len(jobs), size):
            chunk = jobs[start : start + size]
            inputs = torch.stack(
                [_perturbed(x, deleted, base, ranks, ups, count_t, j) for j in chunk]
            )
            if channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            logits = model(inputs).double()
            which = target_t[[i for _, _, i, _ in chunk]]
            probs[start : start + len(chunk)] = (
                logits.softmax(dim=1).gather(1, which[:, None])[:, 0].cpu()
            )
    found = dict(zip(((n, k, i, p) for n, k, i, p in jobs), probs.tolist(), strict=True))

    def curve(n: str, kind: str, start: str, end: str) -> torch.Tensor:
        """``(B, steps + 1)``: the shared first and last points around the map's own."""
        return torch.tensor(
            [
                [found["", start, i, 0]]
                + [found[n, kind, i, p] for p in range(1, last)]
                + [found["", end, i, 0]]
                for i in range(batch)
            ],
            dtype=torch.float64,
        )

    scores: dict[str, Scores] = {}
    for n in names:
        deletion = curve(n, "deletion", "input", "zeros")
        insertion = curve(n, "insertion", "blur", "input")
        masked = torch.tensor([found[n, "masked", i, 0] for i in range(batch)], dtype=torch.float64)
        scores[n] = Scores(
            deletion,
            insertion,
            curve_area(deletion, fractions),
            curve_area(insertion, fractions),
            masked,
        )
    return scores


def _perturbed(
    x: torch.Tensor,
    deleted: torch.Tensor,
    base: torch.Tensor,
    ranks: Mapping[str, torch.Tensor],
    ups: Mapping[str, torch.Tensor],
    counts: torch.Tensor,
    job: tuple[str, str, int, int],
) -> torch.Tensor:
    """One perturbed input: the input itself, all zeros or blurred (the curves' shared ends),
    a deletion or insertion at point ``p``, or the input times the map (pytorch-grad-cam's
    ``multiply_tensor_with_cam``)."""
    import torch

    name, kind, i, p = job
    if kind == "input":
        return x[i]
    if kind == "zeros":
        return deleted[i]
    if kind == "blur":
        return base[i]
    if kind == "masked":
        return x[i] * ups[name][i]
    gone = ranks[name][i] < counts[p]
    if kind == "deletion":
        return torch.where(gone, deleted[i], x[i])
    return torch.where(gone, x[i], base[i])


#: How much higher the masked image's probability must be to count as an increase: the two
#: probabilities come from different batches, whose float32 sums round differently.
INCREASE_TOLERANCE = 1e-6


def confidence_change(before: torch.Tensor, after: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per image: ``drop`` = max(0, p - p_masked) (pytorch-grad-cam's ``DropInConfidence``),
    ``drop_pct`` = 100 * drop / p (Average Drop), ``increase`` = 1 where p_masked > p by more
    than :data:`INCREASE_TOLERANCE` (``IncreaseInConfidence``)."""
    import torch

    drop = torch.clamp(before - after, min=0)
    safe = torch.where(before > 0, before, torch.ones_like(before))
    return {
        "drop": drop,
        "drop_pct": 100 * drop / safe,
        "increase": (after > before + INCREASE_TOLERANCE).double(),
    }


def baseline_maps(
    x: torch.Tensor, grid: tuple[int, int], protocol: Protocol, seeds: Sequence[int]
) -> dict[str, torch.Tensor]:
    """The baselines for a batch, each ``(B, h, w)`` in ``[0, 1]``: ``random`` (uniform on the
    CAM's ``grid``, from each image's seed), ``gaussian`` (centred, sigma a fraction of the
    shorter side of the input) and ``sobel`` (edge magnitude of the channel mean)."""
    import torch
    import torch.nn.functional as F

    batch, _, height, width = x.shape
    noise = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        noise.append(torch.rand(grid, generator=gen, dtype=torch.float64))
    yy = torch.arange(height, dtype=torch.float64) - (height - 1) / 2
    xx = torch.arange(width, dtype=torch.float64) - (width - 1) / 2
    sigma = protocol.gaussian_sigma * min(height, width)
    bump = torch.exp(-(yy[:, None] ** 2 + xx[None, :] ** 2) / (2 * sigma * sigma))
    grey = x.double().mean(dim=1, keepdim=True)
    kx = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]], dtype=torch.float64, device=x.device)
    padded = F.pad(grey, (1, 1, 1, 1), mode="replicate")
    gx = F.conv2d(padded, kx.view(1, 1, 3, 3))
    gy = F.conv2d(padded, kx.t().reshape(1, 1, 3, 3))
    edges = torch.sqrt(gx * gx + gy * gy)[:, 0].cpu()
    return {
        "random": torch.stack(noise),
        "gaussian": (bump / bump.max()).expand(batch, -1, -1).clone(),
        "sobel": _unit(edges),
    }


def _unit(maps: torch.Tensor) -> torch.Tensor:
    """Each map min-max scaled to [0, 1] (a constant map to 0)."""
    import torch

    flat = maps.flatten(1)
    low = flat.amin(dim=1)[:, None, None]
    span = (flat.amax(dim=1) - flat.amin(dim=1))[:, None, None]
    return torch.where(span > 0, (maps - low) / torch.where(span > 0, span, 1), 0.0)


def _ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks of ``(B, n)`` values along dim 1, ties given their average rank."""
    import torch

    order = torch.argsort(values, dim=1, stable=True)
    ordered = torch.gather(values, 1, order)
    ranks = torch.empty_like(values, dtype=torch.float64)
    for row in range(values.shape[0]):
        _, inverse, counts = torch.unique_consecutive(
            ordered[row], return_inverse=True, return_counts=True
        )
        ends = torch.cumsum(counts, 0).double()
        mean_rank = ends - (counts.double() - 1) / 2  # 1-based average rank of each run
        ranks[row, order[row]] = mean_rank[inverse]
    return ranks


def spearman(a: torch.Tensor, b: torch.Tensor) -> list[float | None]:
    """Spearman rank correlation of each pair of ``(B, h, w)`` maps (ties averaged); 1.0 when
    both maps are constant, None when only one is (no ranking to compare)."""
    ra, rb = _ranks(a.flatten(1).double().cpu()), _ranks(b.flatten(1).double().cpu())
    ra = ra - ra.mean(dim=1, keepdim=True)
    rb = rb - rb.mean(dim=1, keepdim=True)
    out: list[float | None] = []
    for u, v in zip(ra, rb, strict=True):
        nu, nv = float(u.norm()), float(v.norm())
        if nu == 0 and nv == 0:
            out.append(1.0)
        elif nu == 0 or nv == 0:
            out.append(None)
        else:
            value = float((u @ v) / (nu * nv))
            out.append(value if math.isfinite(value) else None)
    return out
