"""Principal components of a layer's channel vectors, fitted once over every image of a run.

A layer's output at one position (a pixel of a ``(C, H, W)`` map, a patch token of a vision
transformer with its class and register tokens dropped, a position of a channels-last block)
is a vector of ``C`` channels. Projected on the first three principal components and shown as
RGB, the parts of an image that the layer treats alike share a colour. The components are
fitted once over all the images (not per image: colours would mean nothing from one image to
the next), on at most :data:`MAX_VECTORS` positions sampled with a fixed seed, and each
component's sign is fixed (:data:`actviz.render.pca.SIGN_CONVENTION`), so the same images
give the same colours, whatever the batch size (but for a colour at a level's edge, moved by
one level, or a masked position whose first component is about 0, when the layer's output
changes in its last bits with the batch's composition, as convolutions' outputs do). The
components are the right singular vectors of the centred sample (float64), computed from its
``C x C`` scatter matrix when it has more positions than channels (only the first three of
them from 256 channels).

:class:`PcaSampler` gathers the sample during the run's pass over the images, :func:`fit_pca`
fits it, and :func:`pca_view` does both for activations already in hand.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.cards import side_by_side
from actviz.errors import UsageError
from actviz.layouts import to_drawable
from actviz.render.pca import PcaFit, pca_rgb, project

if TYPE_CHECKING:
    import torch

    from actviz.layouts import LayerContext, Layout

__all__ = [
    "CLIP_NOTE",
    "MAX_VECTORS",
    "SEED",
    "PcaSampler",
    "PcaView",
    "fit_pca",
    "pca_warnings",
    "pca_view",
    "spatial_maps",
]

#: Why a video layer (drawn as time strips) has no PCA view.
CLIP_NOTE = "a video layer's frames are not coloured by --view pca yet"
#: Positions sampled per layer for the fit, at most.
MAX_VECTORS = 4096
#: The seed of that sample.
SEED = 0
_COMPONENTS = 3

F32 = npt.NDArray[np.float32]


def spatial_maps(
    sample: Any, ctx: LayerContext | None, layout: Layout = "auto"
) -> tuple[F32 | None, str | None]:
    """One image's output as ``(C, H, W)`` maps, laid out as the grids draw it (prefix
    tokens dropped, channels-last moved first); None and the reason when it has no
    positions (a vector, something undrawable)."""

    array = sample.numpy() if hasattr(sample, "numpy") else np.asarray(sample)
    drawable = to_drawable(array, ctx, layout=layout)
    if drawable.kind == "clip":
        return None, CLIP_NOTE
    if drawable.kind != "maps" or drawable.array is None:
        return None, drawable.note or "no spatial positions to colour"
    return drawable.array, drawable.note


def pca_warnings(notes: Mapping[str, str]) -> list[str]:
    """Why layers got no PCA picture (capture key -> why): a line each, but one line for
    every video layer (a video model's are all time strips, not coloured yet)."""
    clips = [key for key, note in notes.items() if note == CLIP_NOTE]
    said = [f"--view pca: no PCA picture of {k}: {n}" for k, n in notes.items() if n != CLIP_NOTE]
    if clips:
        more = f" and {len(clips) - 3} more" if len(clips) > 3 else ""
        said.append(
            f"--view pca: no PCA picture of {len(clips)} video layer(s) "
            f"({', '.join(clips[:3])}{more}): {CLIP_NOTE}; their grids draw them as time strips"
        )
    return said


def fit_pca(vectors: npt.ArrayLike, *, images: int = 1, seed: int = SEED) -> PcaFit:
    """The first three principal components of ``(N, C)`` vectors (the right singular
    vectors of the centred sample), their signs fixed, with the colour range of each.

    Non-finite values count as 0. With fewer than three channels (or positions), the
    missing components are zero.
    """
    import torch

    # One float64 copy of the sample, centred in place.
    data = torch.from_numpy(np.array(vectors, dtype=np.float64))
    data.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    n, c = data.shape
    mean = data.mean(dim=0) if n else torch.zeros(c, dtype=torch.float64)
    centred = data.sub_(mean)
    components = torch.zeros(_COMPONENTS, c, dtype=torch.float64)
    explained = [0.0] * _COMPONENTS
    if n >= 2 and c >= 1:
        variances, directions, total = _principal_axes(centred)
        k = min(_COMPONENTS, len(variances))
        for i in range(k):
            row = directions[i]
            if row[row.abs().argmax()] < 0:
                row = -row
            components[i] = row
            explained[i] = max(float(variances[i]), 0.0) / total if total > 0 else 0.0
    projected = centred @ components.T
    if n:
        q = torch.tensor([0.01, 0.99], dtype=torch.float64)
        bounds = torch.quantile(projected, q, dim=0)
        low, high = bounds[0], bounds[1]
    else:
        low = high = torch.zeros(_COMPONENTS, dtype=torch.float64)
    return PcaFit(
        mean=mean.numpy().astype(np.float32),
        components=components.numpy().astype(np.float32),
        explained=tuple(explained),
        low=low.numpy().astype(np.float32),
        high=high.numpy().astype(np.float32),
        vectors=n,
        images=images,
        seed=seed,
    )


def _principal_axes(centred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The squared singular values and the right singular vectors (rows) of the centred
    sample, largest first (at least the first three), and their total (the sample's sum of
    squares).

    They come from the eigendecomposition of the smaller of the two Gram matrices: ``X^T X``
    (``C x C``) when there are more positions than channels, the usual case, or ``X X^T``,
    whose eigenvectors ``u`` give the axes as ``X^T u / |X^T u|``. The same axes and values
    as the SVD of ``X``, about ten times faster for 4096 positions of 512 channels. The Gram
    matrix is numpy's product of the array with its own transpose, which BLAS computes as a
    symmetric rank-k update: half the work of a general product. From
    :data:`_ITERATE_FROM` channels, only the first three are computed (:func:`_top_axes`).
    """
    import torch

    n, c = centred.shape
    x = centred.numpy()
    if n > c:
        gram = torch.from_numpy(x.T @ x)
        total = float(gram.diagonal().sum())
        top = _top_axes(gram, total) if c >= _ITERATE_FROM else None
        if top is not None:
            return top[0], top[1], total
        values, vectors = torch.linalg.eigh(gram)
        return values.flip(0), vectors.flip(1).T, total
    gram = torch.from_numpy(x @ x.T)
    values, vectors = torch.linalg.eigh(gram)
    values, vectors = values.flip(0), vectors.flip(1)
    axes = (centred.T @ vectors).T  # (n, c): rows scaled by the singular values
    norms = axes.norm(dim=1, keepdim=True)
    axes = torch.where(norms > 0, axes / norms.clamp(min=1e-300), axes)
    return values, axes, float(gram.diagonal().sum())


#: Channels from which the first components are found by subspace iteration, not by a whole
#: eigendecomposition (below it, the whole one takes a millisecond or two).
_ITERATE_FROM = 256
_BLOCK = 16
_MOST_ROUNDS = 30
_RESIDUAL = 1e-13


def _top_axes(gram: torch.Tensor, trace: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The three largest eigenvalues of a symmetric ``C x C`` matrix and their eigenvectors
    (rows), by subspace iteration on a block of 16 with a Rayleigh-Ritz step each round,
    in float64, from a seeded start; None when 30 rounds leave a residual above 1e-13 of the
    ``trace`` (a nearly flat spectrum), for the whole eigendecomposition to do.

    Only three of C eigenvectors are needed: on resnet18's 512-channel layers this takes 5 ms
    against 27-32 ms for ``torch.linalg.eigh`` (8-12 rounds), the same values and vectors to
    within 2e-15."""
    import torch

    c = gram.shape[0]
    start = torch.randn(c, _BLOCK, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    basis = torch.linalg.qr(start)[0]
    tolerance = _RESIDUAL * trace
    for _ in range(_MOST_ROUNDS):
        image = gram @ basis
        values, rotation = torch.linalg.eigh(basis.T @ image)  # ascending
        top = rotation[:, -_COMPONENTS:]
        vectors = basis @ top
        residual = image @ top - vectors * values[-_COMPONENTS:]
        if float(residual.norm(dim=0).max()) <= tolerance:
            return values[-_COMPONENTS:].flip(0), vectors.flip(1).T
        basis = torch.linalg.qr(image @ rotation)[0]
    return None


class PcaSampler:
    """Per capture key, a fixed sample of positions from every image of a run.

    Each image gives at most ``ceil(max_vectors / images)`` positions, chosen by a generator
    seeded by the seed, the image's index in the run and the key, so the sample does not
    depend on how the images were batched.

    Args:
        images: How many images the run has.
        max_vectors: Positions per layer at most.
        seed: The seed of the choice.
    """

    def __init__(self, images: int, max_vectors: int = MAX_VECTORS, seed: int = SEED) -> None:
        if max_vectors < _COMPONENTS:
            raise UsageError(f"the PCA sample needs at least {_COMPONENTS} vectors")
        self.per_image = max(1, math.ceil(max_vectors / max(images, 1)))
        self.max_vectors = max_vectors
        self.seed = seed
        self._samples: dict[str, dict[int, F32]] = {}
        self.notes: dict[str, str] = {}

    def add(self, key: str, image: int, maps: F32) -> None:
        """Sample positions of one image's ``(C, H, W)`` maps."""
        c = maps.shape[0]
        flat = maps.reshape(c, -1)
        positions = flat.shape[1]
        rng = np.random.default_rng([self.seed, image, zlib.crc32(key.encode())])
        take = min(self.per_image, positions)
        chosen = np.sort(rng.choice(positions, size=take, replace=False))
        self._samples.setdefault(key, {})[image] = np.ascontiguousarray(flat[:, chosen].T)

    def add_sample(
        self, key: str, image: int, sample: Any, ctx: LayerContext | None, layout: Layout
    ) -> None:
        """Lay out one image's output (:func:`spatial_maps`) and sample it; outputs without
        positions are noted and skipped."""
        maps, note = spatial_maps(sample, ctx, layout)
        if maps is None:
            self.notes.setdefault(key, note or "no spatial positions")
            return
        self.add(key, image, maps)

    def keys(self) -> list[str]:
        """The keys sampled so far, in the order they were first sampled."""
        return list(self._samples)

    def cost(self, key: str) -> int:
        """About how much work the fit of ``key`` is: positions times channels squared."""
        per_image = self._samples.get(key, {})
        rows = sum(v.shape[0] for v in per_image.values())
        channels = max((v.shape[1] for v in per_image.values()), default=0)
        return int(min(rows, self.max_vectors) * channels * channels)

    def fit(self, key: str) -> PcaFit | None:
        """The fit of one key, on its images' samples in image order (cut to
        ``max_vectors``); None, with a note, when it has none. Keys may be fitted in any
        order and at once in several threads, once sampling is over."""
        per_image = self._samples.get(key, {})
        widths = {v.shape[1] for v in per_image.values()}
        if len(widths) != 1:
            if widths:
                self.notes[key] = "the channel count changed between images"
            return None
        stacked = np.concatenate([per_image[i] for i in sorted(per_image)])
        return fit_pca(stacked[: self.max_vectors], images=len(per_image), seed=self.seed)

    def fits(self) -> dict[str, PcaFit]:
        """One fit per key (:meth:`fit`), in the order the keys were sampled."""
        fitted = {key: self.fit(key) for key in self.keys()}
        return {key: fit for key, fit in fitted.items() if fit is not None}


@dataclass(frozen=True)
class PcaView:
    """The components of a layer as colour, for each image.

    Attributes:
        fit: The components, fitted once over every image.
        images: ``(H, W, 3)`` uint8 per image.
        projections: ``(H, W, 3)`` float32 per image: the values the colours come from.
        note: How the output was laid out (prefix tokens dropped, ...), if anything was done.
    """

    fit: PcaFit
    images: list[npt.NDArray[np.uint8]]
    projections: list[F32]
    note: str | None

    def _repr_png_(self) -> bytes:
        """The first images' colours side by side (a cell shows them)."""

        return side_by_side(self.images)

    def __repr__(self) -> str:
        explained = ", ".join(f"{e:.2f}" for e in self.fit.explained)
        shapes = {tuple(i.shape[:2]) for i in self.images}
        return f"PcaView(images={len(self.images)}, size={sorted(shapes)}, explained=({explained}))"


def pca_view(
    activations: torch.Tensor | npt.NDArray[Any] | Sequence[Any],
    *,
    context: LayerContext | None = None,
    layout: Layout = "auto",
    mask: bool = False,
    max_vectors: int = MAX_VECTORS,
    seed: int = SEED,
) -> PcaView:
    """Colour one layer's positions by their first three principal components, fitted once
    over all the given images.

    Args:
        activations: The layer's output for several images: a batch (``(B, C, H, W)``,
            ``(B, 1 + H*W, C)`` tokens, ``(B, H, W, C)``), or a sequence of per-image outputs.
        context: What the model says about the layer (``actviz.layouts.layer_contexts``).
        layout: ``auto``, or force ``nchw``, ``nhwc`` or ``tokens``.
        mask: Black where the first component is negative (the background, often).
        max_vectors: Positions sampled for the fit, at most.
        seed: The seed of that sample.

    Returns:
        The fit, and each image's colours and projections.

    Raises:
        UsageError: When the output has no spatial positions (a vector) or images disagree.

    Example:
        >>> with actviz.capture(model, "encoder.layers.encoder_layer_11") as acts:
        ...     model(x)
        >>> view = actviz.pca_view(acts["encoder.layers.encoder_layer_11"], context=ctx)
        >>> view.images[0].shape, view.fit.explained
    """
    samples = list(activations)
    if hasattr(activations, "detach"):
        samples = [s.detach().cpu().float() for s in samples]
    sampler = PcaSampler(len(samples), max_vectors, seed)
    maps_list = []
    note = None
    for i, sample in enumerate(samples):
        maps, note = spatial_maps(sample, context, layout)
        if maps is None:
            raise UsageError(f"cannot colour this output by its components: {note}")
        sampler.add("layer", i, maps)
        maps_list.append(maps)
    fitted = sampler.fits()
    if "layer" not in fitted:
        raise UsageError(sampler.notes.get("layer", "no images given"))
    fit = fitted["layer"]
    projections = [project(maps, fit) for maps in maps_list]
    return PcaView(
        fit=fit,
        images=[pca_rgb(p, fit, mask=mask) for p in projections],
        projections=projections,
        note=note,
    )


def fit_run(
    forward: Any,
    paths: Sequence[Any],
    recorder: Any,
    contexts: Mapping[str, Any],
    layout: Layout,
) -> tuple[dict[str, PcaFit], dict[str, str]]:
    """The first pass of a run with ``--view pca``: every image through the hooked model,
    a sample per capture key, one fit each. Returns the fits and, per key that has none,
    why."""

    sampler = PcaSampler(len(paths))
    with contextlib.ExitStack() as stack:
        for good, _logits, _x in forward.batches(paths, stack):
            for cap in recorder.captures:
                if cap.kind == "attention":
                    continue
                batch = recorder[cap.key]
                ctx = contexts.get(cap.module)
                for row, (index, _size, _tensor) in enumerate(good):
                    sampler.add_sample(cap.key, index, batch[row], ctx, layout)
    return sampler.fits(), dict(sampler.notes)
