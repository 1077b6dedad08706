"""How learnable a concept is: a linear probe from a layer's per-image unit scores, and the
same probe from the images' pixels (each image reduced to 8 x 8 per colour), cross-validated
and seeded. A concept a probe recovers from pixels about as well as from the layer is a concept
the layer need not have learned; one the layer's probe barely recovers is hard for the layer,
whatever its units' labels say (Ramaswamy et al., CVPR 2023).

The probe is ridge regression on standardised features, in closed form through one singular
value decomposition per fold; its strength is chosen per concept, on the training part of each
fold, by the exact leave-one-out error (``e_i / (1 - h_ii)``) over a small grid. Its held-out
predictions, gathered over the folds, are scored by AUPRC against the labels: the base rate
(the concept's share of the images) is what a probe that learned nothing scores.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from actviz.label.metrics import METRICS
from actviz.label.ranking import rank_units

__all__ = ["FOLDS", "PIXEL_GRID", "RIDGE_GRID", "probe_auprc"]

F64 = npt.NDArray[np.float64]
FOLDS = 5
#: Each image is reduced to this many cells a side per colour for the pixel probe.
PIXEL_GRID = 8
#: Ridge strengths tried, as multiples of the mean squared singular value.
RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)


def probe_auprc(
    features: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    folds: int = FOLDS,
    seed: int = 0,
) -> F64:
    """Per concept, the AUPRC of a cross-validated ridge probe's held-out predictions.

    Args:
        features: ``(N, D)`` one row per image.
        labels: ``(N, K)`` the concepts' labels.
        folds: Folds of the cross-validation (fewer when there are fewer images).
        seed: Seed of the fold assignment.

    Returns:
        ``(K,)``; NaN for a concept with no positive or no negative image.
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n, k = y.shape
    out = np.full(k, np.nan)
    if n < 4 or k == 0:
        return out
    folds = max(2, min(folds, n // 2))
    fold = np.random.default_rng(seed).permutation(n) % folds
    predicted = np.zeros((n, k), dtype=np.float64)
    for f in range(folds):
        train, test = fold != f, fold == f
        predicted[test] = _fit_predict(x[train], y[train].astype(np.float64), x[test])
    auprc = METRICS["auprc"]
    for c in range(k):
        positives = int(y[:, c].sum())
        if 0 < positives < n:
            out[c] = float(auprc.observe(rank_units(predicted[:, [c]]), y[:, c], 0.0)[0])
    return out


def _fit_predict(x: F64, y: F64, x_test: F64) -> F64:
    """Ridge from ``x`` to every column of ``y``, each with the strength of least
    leave-one-out error; the predictions for ``x_test``."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    xs, xt = (x - mean) / std, (x_test - mean) / std
    y_mean = y.mean(axis=0)
    yc = y - y_mean
    u, s, vt = np.linalg.svd(xs, full_matrices=False)
    s2 = s**2
    scale = float(s2.mean()) if s2.size and s2.mean() > 0 else 1.0
    uty = u.T @ yc  # (r, K)
    best_error = np.full(y.shape[1], np.inf)
    best = np.zeros((x.shape[1], y.shape[1]), dtype=np.float64)
    for factor in RIDGE_GRID:
        shrink = s2 / (s2 + factor * scale)  # (r,)
        fitted = u @ (shrink[:, None] * uty)
        leverage = np.clip((u**2) @ shrink, 0.0, 1.0 - 1e-9)
        error = (((yc - fitted) / (1.0 - leverage)[:, None]) ** 2).mean(axis=0)
        weights = vt.T @ ((s / (s2 + factor * scale))[:, None] * uty)  # (D, K)
        better = error < best_error
        best[:, better] = weights[:, better]
        best_error = np.where(better, error, best_error)
    result: F64 = xt @ best + y_mean
    return result
