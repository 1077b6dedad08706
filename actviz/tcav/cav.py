"""Concept activation vectors and what they say of a class, as plain arrays.

A CAV is a direction in a layer's channel space (one value per channel: the vector each map
position holds) that points from random images towards a concept's. The ways to find one are
rows of :data:`CAVS`: FastCAV (Schmalwasser et al., ICML 2025: the concept's mean activation
minus the mean of all, in closed form) and a linear SVM trained by stochastic gradient descent
(what TCAV and captum train). Every vector is kept at unit length.

The TCAV score of a vector for a class is the share of the class's images whose class score
rises along it: the gradient of the score with respect to the layer, summed over positions (the
derivative along the vector added at every position), dotted with the vector, above zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from actviz.errors import import_extra

__all__ = [
    "CAVS",
    "CavMethod",
    "TEST_PERMUTATIONS",
    "fast_cav",
    "linear_cav",
    "tcav_scores",
    "two_sided_test",
    "welch_t",
]

F64 = npt.NDArray[np.float64]
#: Permutations of the two-sided test (the smallest p-value is one over this plus one).
TEST_PERMUTATIONS = 10_000


def _unit(v: F64) -> F64:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def fast_cav(positives: npt.ArrayLike, negatives: npt.ArrayLike, seed: int = 0) -> F64:
    """FastCAV: the mean of the concept's vectors minus the mean of all of them (the concept's
    and the random ones together), at unit length."""
    pos = np.asarray(positives, dtype=np.float64)
    every = np.concatenate([pos, np.asarray(negatives, dtype=np.float64)])
    return _unit(pos.mean(axis=0) - every.mean(axis=0))


def linear_cav(positives: npt.ArrayLike, negatives: npt.ArrayLike, seed: int = 0) -> F64:
    """The normal of a linear SVM between the concept's vectors and the random ones, trained by
    stochastic gradient descent (scikit-learn's ``SGDClassifier`` with the hinge loss and the
    settings of TCAV's and captum's default classifier), at unit length, towards the concept.
    """
    linear_model = import_extra("sklearn.linear_model", "tcav", "--cav linear needs scikit-learn")
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.asarray(negatives, dtype=np.float64)
    x = np.concatenate([pos, neg])
    y = np.concatenate([np.ones(len(pos), dtype=int), np.zeros(len(neg), dtype=int)])
    classifier = linear_model.SGDClassifier(
        loss="hinge", alpha=0.01, max_iter=1000, tol=1e-3, random_state=seed
    )
    classifier.fit(x, y)
    return _unit(np.asarray(classifier.coef_[0], dtype=np.float64))


@dataclass(frozen=True)
class CavMethod:
    """One way to find a concept activation vector.

    Attributes:
        name: Its name on the command line and in files.
        title: How pages and tables show it.
        train: ``(positives (n, C), negatives (m, C), seed)`` -> the unit vector ``(C,)``.
    """

    name: str
    title: str
    train: Callable[[npt.ArrayLike, npt.ArrayLike, int], F64]


CAVS: dict[str, CavMethod] = {
    m.name: m
    for m in (
        CavMethod("fast", "FastCAV (mean difference, closed form)", fast_cav),
        CavMethod("linear", "linear SVM (SGD, hinge loss)", linear_cav),
    )
}


def tcav_scores(gradients: npt.ArrayLike, cavs: npt.ArrayLike) -> tuple[F64, F64]:
    """Per vector, the TCAV score (the share of the images whose directional derivative is
    above zero) and the mean directional derivative (captum's ``magnitude``).

    Args:
        gradients: ``(N, C)`` each image's gradient of its class score, in channel space.
        cavs: ``(R, C)`` the vectors.
    """
    g = np.asarray(gradients, dtype=np.float64)
    v = np.asarray(cavs, dtype=np.float64)
    if g.shape[0] == 0:
        return np.full(v.shape[0], np.nan), np.full(v.shape[0], np.nan)
    derivatives = g @ v.T
    return (derivatives > 0).mean(axis=0), derivatives.mean(axis=0)


def two_sided_test(
    scores: npt.ArrayLike,
    random: npt.ArrayLike,
    *,
    permutations: int = TEST_PERMUTATIONS,
    seed: int = 0,
) -> float:
    """Whether the concept's scores over the runs and the random vectors' differ in mean, either
    way: a permutation test of the two sets of runs (the runs' labels permuted as a matrix),
    ``(1 + as far apart) / (1 + permutations)``. Unlike a t-test it needs no spread: twenty runs
    of 1.0 against twenty of 0.5 are told apart."""
    a = np.asarray(scores, dtype=np.float64)
    b = np.asarray(random, dtype=np.float64)
    pooled = np.concatenate([a, b])
    observed = abs(a.mean() - b.mean())
    rng = np.random.default_rng([seed, 0x7CA5])
    order = rng.permuted(
        np.broadcast_to(np.arange(pooled.size), (permutations, pooled.size)), axis=1
    )
    values = pooled[order]
    apart = np.abs(values[:, : a.size].mean(axis=1) - values[:, a.size :].mean(axis=1))
    return float((1 + np.count_nonzero(apart >= observed - 1e-12)) / (1 + permutations))


def welch_t(scores: npt.ArrayLike, random: npt.ArrayLike) -> float | None:
    """Welch's t statistic of the two sets of runs (recorded beside the test; None without
    spread)."""
    a = np.asarray(scores, dtype=np.float64)
    b = np.asarray(random, dtype=np.float64)
    spread = a.var(ddof=1) / a.size + b.var(ddof=1) / b.size
    return None if spread <= 0 else float((a.mean() - b.mean()) / np.sqrt(spread))
