"""Layer similarity, streamed: linear CKA with the debiased HSIC estimator, per-image cosine
similarity and relative L2 difference, accumulated over minibatches in float64.

Nothing here keeps activations across batches: an accumulator holds running sums, plus at most
a few images' features while it waits to fill a group of four (the unbiased HSIC needs
``n >= 4``). Everything is numpy; torch is not imported.

Linear CKA (Kornblith et al. 2019) compares two representations of the same images through
their Gram matrices ``K = X X^T`` and ``L = Y Y^T``. With the unbiased HSIC estimator of Song
et al. (2012), summed over minibatches as in Nguyen, Raghu and Kornblith, "Do wide and deep
networks learn the same things?" (2021)::

    HSIC_1(K, L) = [tr(K~ L~) + (1^T K~ 1)(1^T L~ 1) / ((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1]
                   / (n (n-3))              (K~, L~: K and L with their diagonals zeroed)

    CKA = sum_b HSIC_1(K_b, L_b) / sqrt(sum_b HSIC_1(K_b, K_b) * sum_b HSIC_1(L_b, L_b))

Features are centred per group before the Gram matrices are formed. HSIC_1 does not change
(it is invariant to adding a constant vector to every row), and the Gram matrices of large,
nearly constant activations then do not lose their digits to cancellation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CONSTANT_RTOL",
    "IDENTICAL_RTOL",
    "MIN_GROUP",
    "CkaResult",
    "LayerComparison",
    "biased_hsic",
    "cosine_similarity",
    "hold_back",
    "relative_l2",
    "unbiased_hsic",
]

F64 = npt.NDArray[np.float64]

#: The unbiased HSIC estimator divides by n (n - 3): a group needs four images at least.
MIN_GROUP = 4
#: A side whose summed HSIC(K, K) is at most this fraction of its squared mean squared norm
#: has no variation across the images (a constant or zero layer): CKA is then 0/0.
CONSTANT_RTOL = 1e-24
#: Two activations are "identical up to numerical noise" when ||B - A|| <= this * ||A||.
IDENTICAL_RTOL = 1e-6


def unbiased_hsic(k: F64, lm: F64) -> float:
    """The unbiased HSIC estimator of Song et al. (2012) for two ``(n, n)`` Gram matrices,
    ``n >= 4``."""
    n = int(k.shape[0])
    if n < MIN_GROUP:
        raise ValueError(f"the unbiased HSIC needs at least {MIN_GROUP} samples, got {n}")
    kt = k.copy()
    lt = lm.copy()
    np.fill_diagonal(kt, 0.0)
    np.fill_diagonal(lt, 0.0)
    k_rows = kt.sum(axis=0)
    l_rows = lt.sum(axis=0)
    trace = float(np.einsum("ij,ji->", kt, lt))
    middle = float(k_rows.sum() * l_rows.sum()) / ((n - 1) * (n - 2))
    last = 2.0 * float(k_rows @ l_rows) / (n - 2)
    return (trace + middle - last) / (n * (n - 3))


def biased_hsic(k: F64, lm: F64) -> float:
    """The biased HSIC ``tr(K H L H) / (n - 1)^2``, ``H`` the centring matrix; any ``n >= 1``."""
    n = int(k.shape[0])
    h = np.eye(n) - 1.0 / n
    return float(np.einsum("ij,ji->", h @ k @ h, h @ lm @ h)) / max(n - 1, 1) ** 2


def cosine_similarity(a: F64, b: F64) -> F64:
    """Per row: the cosine of the angle between ``a[i]`` and ``b[i]``. Defined everywhere: 1.0
    when both rows are zero (they are identical), 0.0 when only one is."""
    dot = np.einsum("ij,ij->i", a, b)
    # sqrt(|a|^2 |b|^2) rather than |a| |b|: identical rows then give exactly 1.
    norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    both_zero = ~np.any(a != 0, axis=1) & ~np.any(b != 0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norms > 0, dot / np.where(norms > 0, norms, 1.0), 0.0)
    out: F64 = np.where(both_zero, 1.0, np.clip(cos, -1.0, 1.0))
    return out


def relative_l2(a: F64, b: F64) -> F64:
    """Per row: ``||b - a|| / ||a||``. Where ``||a|| = 0`` it is 0.0 when ``b`` is zero too,
    else 1.0 (``b`` measured against itself)."""
    diff = np.sqrt(np.einsum("ij,ij->i", b - a, b - a))
    base = np.sqrt(np.einsum("ij,ij->i", a, a))
    out: F64 = np.where(
        base > 0, diff / np.where(base > 0, base, 1.0), np.where(diff > 0, 1.0, 0.0)
    )
    return out


#: Columns converted to float64 at a time: a block that stays in cache, summed in float64.
_BLOCK = 16384


def _grams(a: npt.NDArray[Any], b: npt.NDArray[Any], *, cross: bool) -> tuple[F64, F64, F64 | None]:
    """``A A^T``, ``B B^T`` and (with ``cross``, same widths) ``A B^T``, in float64.

    The features are converted to float64 a block of columns at a time and the block Gram
    matrices summed: the same float64 sums as one product of the whole float64 matrices,
    without writing them out (memory traffic, not arithmetic, is what this costs)."""
    n = a.shape[0]
    if cross:
        g = _blocked_gram([a, b])
        return g[:n, :n], g[n:, n:], g[:n, n:]
    return _blocked_gram([a]), _blocked_gram([b]), None


def _blocked_gram(parts: list[npt.NDArray[Any]]) -> F64:
    """The float64 Gram matrix of the rows of ``parts`` stacked (all the same width)."""
    rows = sum(p.shape[0] for p in parts)
    width = parts[0].shape[1]
    gram = np.zeros((rows, rows), dtype=np.float64)
    block = np.empty((rows, min(_BLOCK, width)), dtype=np.float64)
    for start in range(0, width, _BLOCK):
        stop = min(width, start + _BLOCK)
        z = block[:, : stop - start]
        top = 0
        for part in parts:
            z[top : top + part.shape[0]] = part[:, start:stop]
            top += part.shape[0]
        gram += z @ z.T
    return gram


def _centred(k: F64) -> F64:
    """``H K H``: the Gram matrix of the features after subtracting their mean."""
    row = k.mean(axis=0, keepdims=True)
    out: F64 = k - row - row.T + k.mean()
    return out


def hold_back(remaining: int) -> int:
    """How many of a batch's images to keep for the next CKA group when ``remaining`` images
    are still to come, so that the last group has at least :data:`MIN_GROUP` images."""
    return MIN_GROUP - remaining if 0 < remaining < MIN_GROUP else 0


@dataclass(frozen=True)
class CkaResult:
    """One layer's CKA over a folder.

    Attributes:
        value: The CKA; never NaN. Where it is undefined (a side without variation across the
            images), 1.0 if the two activations are identical up to numerical noise, else
            0.0, with ``defined`` False.
        defined: False when ``value`` is the stand-in for 0/0 described above.
        estimator: ``unbiased`` (minibatch debiased HSIC), ``biased`` (fewer than four images
            in all), or ``none`` (no image).
        images: Images that entered the estimate.
        groups: Minibatches summed.
        note: Why the value is a stand-in, or which images were left out; None otherwise.
    """

    value: float
    defined: bool
    estimator: str
    images: int
    groups: int
    note: str | None = None


class LayerComparison:
    """Running sums for one layer of model A against the same layer of model B.

    Feed it each batch's ``(n, ...)`` activations with :meth:`add`; read the results with
    :meth:`cka`, :attr:`cosine` and :attr:`rel_l2`. Memory: the sums, plus the features of at
    most ``MIN_GROUP - 1`` images (or one batch at the very end) waiting for a full group.

    Everything comes from one float64 Gram matrix per batch, ``[A; B] [A; B]^T``: ``K = A A^T``
    and ``L = B B^T`` for CKA, and their diagonals and that of ``A B^T`` for the cosines and
    ``||B - A||^2 = |A|^2 + |B|^2 - 2 A.B``. One pass over the activations (their conversion
    to float64) and one matrix product, which BLAS spreads over the cores. The relative L2 is
    then resolved to about 1e-8 of ``||A||`` (float64 cancellation), far below float32 noise.

    Args:
        cka: Accumulate CKA (False: cosine and relative L2 only, e.g. for one image pair).
    """

    def __init__(self, *, cka: bool = True) -> None:
        self.with_cka = cka
        self.hsic_xy = 0.0
        self.hsic_xx = 0.0
        self.hsic_yy = 0.0
        self.scale_x = 0.0
        self.scale_y = 0.0
        self.groups = 0
        self.cka_images = 0
        self.images = 0
        self.same_shape = True
        self.cos_sum = 0.0
        self.rel_sum = 0.0
        self.sq_a = 0.0
        self.sq_diff = 0.0
        self._carry: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None

    def add(self, x: npt.ArrayLike, y: npt.ArrayLike, *, hold: int = 0) -> None:
        """One batch: ``x`` from model A and ``y`` from model B, one row per image (any shape
        after the first axis, flattened). ``hold`` images at the end wait for the next group
        (see :func:`hold_back`)."""
        a = np.asarray(x)
        b = np.asarray(y)
        n = a.shape[0]
        if b.shape[0] != n:
            raise ValueError(f"x has {n} rows and y {b.shape[0]}")
        a = a.reshape(n, -1)
        b = b.reshape(n, -1)
        if a.shape[1] != b.shape[1]:
            self.same_shape = False
        carried = 0
        if self.with_cka and self._carry is not None:
            carried = self._carry[0].shape[0]
            a = np.concatenate([self._carry[0], a])
            b = np.concatenate([self._carry[1], b])
            self._carry = None
        k, lm, cross = _grams(a, b, cross=self.same_shape)
        self.images += n
        if cross is not None:
            new = slice(carried, carried + n)
            aa, bb, ab = np.diag(k)[new], np.diag(lm)[new], np.diag(cross)[new]
            sq_diff = np.maximum(aa + bb - 2.0 * ab, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                norms = np.sqrt(aa * bb)
                cos = np.where(norms > 0, ab / np.where(norms > 0, norms, 1.0), 0.0)
                cos = np.where((aa == 0) & (bb == 0), 1.0, np.clip(cos, -1.0, 1.0))
                rel = np.where(
                    aa > 0, np.sqrt(sq_diff / np.where(aa > 0, aa, 1.0)), np.where(bb > 0, 1.0, 0.0)
                )
            self.cos_sum += float(cos.sum())
            self.rel_sum += float(rel.sum())
            self.sq_a += float(aa.sum())
            self.sq_diff += float(sq_diff.sum())
        if not self.with_cka:
            return
        use = a.shape[0] - hold
        if use >= MIN_GROUP:
            self._group(k[:use, :use], lm[:use, :use])
            if hold:
                self._carry = (a[use:].copy(), b[use:].copy())
        else:  # too few for a group: wait for the next batch (copies: not views of the batch)
            self._carry = (a.copy(), b.copy())

    def _group(self, k: F64, lm: F64) -> None:
        """Add one group's HSIC terms, from its raw Gram matrices."""
        n = k.shape[0]
        self.scale_x += float(np.trace(k) / n) ** 2
        self.scale_y += float(np.trace(lm) / n) ** 2
        # Centring the features (H K H) leaves HSIC_1 unchanged and keeps the terms small.
        kc, lc = _centred(k), _centred(lm)
        self.hsic_xy += unbiased_hsic(kc, lc)
        self.hsic_xx += unbiased_hsic(kc, kc)
        self.hsic_yy += unbiased_hsic(lc, lc)
        self.groups += 1
        self.cka_images += n

    @property
    def cosine(self) -> float | None:
        """Mean per-image cosine similarity; None when the shapes differ."""
        if not self.same_shape or not self.images:
            return None
        return self.cos_sum / self.images

    @property
    def rel_l2(self) -> float | None:
        """Mean per-image ``||B - A|| / ||A||``; None when the shapes differ."""
        if not self.same_shape or not self.images:
            return None
        return self.rel_sum / self.images

    @property
    def identical(self) -> bool:
        """B equals A over every image, up to numerical noise."""
        if not self.same_shape or not self.images:
            return False
        return math.sqrt(self.sq_diff) <= IDENTICAL_RTOL * math.sqrt(self.sq_a)

    def cka(self) -> CkaResult:
        """The CKA over everything added so far (the images still waiting for a group are
        used when they are all there is: with fewer than four images in all, the biased
        estimator; otherwise a last short group is left out and counted in the note)."""
        note = None
        xy, xx, yy = self.hsic_xy, self.hsic_xx, self.hsic_yy
        scale_x, scale_y = self.scale_x, self.scale_y
        groups, images = self.groups, self.cka_images
        estimator = "unbiased"
        carry = self._carry
        if carry is not None and carry[0].shape[0] >= MIN_GROUP:
            extra = LayerComparison()
            extra._group(*_grams(carry[0], carry[1], cross=False)[:2])
            xy, xx, yy = xy + extra.hsic_xy, xx + extra.hsic_xx, yy + extra.hsic_yy
            scale_x, scale_y = scale_x + extra.scale_x, scale_y + extra.scale_y
            groups, images = groups + 1, images + extra.cka_images
        elif carry is not None and groups == 0:
            estimator = "biased"
            k, lm, _ = _grams(carry[0], carry[1], cross=False)
            n = k.shape[0]
            scale_x = float(np.trace(k) / n) ** 2
            scale_y = float(np.trace(lm) / n) ** 2
            xy, xx, yy = biased_hsic(k, lm), biased_hsic(k, k), biased_hsic(lm, lm)
            groups, images = 1, n
        elif carry is not None:
            note = f"the last {carry[0].shape[0]} image(s) made no group of {MIN_GROUP}: left out"
        if images == 0:
            return CkaResult(
                1.0 if self.identical else 0.0, False, "none", 0, 0, "no images to compare"
            )
        flat_x = xx <= CONSTANT_RTOL * scale_x
        flat_y = yy <= CONSTANT_RTOL * scale_y
        if flat_x or flat_y:
            which = "A and B do" if flat_x and flat_y else ("A does" if flat_x else "B does")
            value = 1.0 if self.identical else 0.0
            why = (
                f"{which} not vary across the images, so CKA is 0/0; "
                f"{value:g} stands for {'identical' if value else 'different'} activations"
            )
            return CkaResult(value, False, estimator, images, groups, why)
        return CkaResult(xy / math.sqrt(xx * yy), True, estimator, images, groups, note)
