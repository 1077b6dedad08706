"""label's statistics on plain arrays: each metric against scikit-learn or numpy (ties and
constant units included), the vectorised null against permutations applied one by one, the
NeuronEval sanity checks as tests of the metrics (and AUC documented failing one),
Benjamini-Hochberg against its definition, the exact quantile, and the learnability probe."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from actviz.label.masks import TopValues
from actviz.label.metrics import METRICS, relabelled_drop
from actviz.label.probe import probe_auprc
from actviz.label.ranking import rank_units
from actviz.label.significance import (
    Permuted,
    benjamini_hochberg,
    permutation_rows,
    permutation_test,
)


def _scores(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.2
    s = rng.normal(size=(n, 6))
    s[:, 0] += 2.0 * y  # a detector
    s[:, 1] = np.round(s[:, 1] + y, 1)  # ties everywhere
    s[:, 2] = 3.0  # constant
    s[:, 3] = np.maximum(s[:, 3] + y, 0.0)  # a tie block of zeros at the bottom
    s[:, 4] = rng.integers(0, 3, n) + y  # three levels and the concept
    return s, y


def test_metrics_equal_scikit_learn_and_numpy_with_ties_and_constants() -> None:
    s, y = _scores()
    ranked = rank_units(s)
    ap = METRICS["auprc"].observe(ranked, y, 0.1)
    assert ap == pytest.approx([average_precision_score(y, s[:, u]) for u in range(6)], abs=1e-12)
    auc = METRICS["auc"].observe(ranked, y, 0.1)
    assert auc == pytest.approx([roc_auc_score(y, s[:, u]) for u in range(6)], abs=1e-12)
    r = METRICS["pearson"].observe(ranked, y, 0.1)
    expected = [np.corrcoef(s[:, u], y)[0, 1] if u != 2 else 0.0 for u in range(6)]
    assert r == pytest.approx(expected, abs=1e-12)
    # F1 at the top 10%: the whole tie block at the threshold fires, as a threshold on values.
    f1 = METRICS["f1"].observe(ranked, y, 0.1)
    for u in range(6):
        threshold = np.sort(s[:, u])[::-1][int(np.ceil(0.1 * len(y))) - 1]
        fired = s[:, u] >= threshold
        tp = (fired & y).sum()
        assert f1[u] == pytest.approx(2 * tp / (y.sum() + fired.sum()), abs=1e-12)
    assert ranked.constant.tolist() == [False, False, True, False, False, False]


def test_the_vectorised_null_is_each_permutation_scored_one_by_one() -> None:
    s, y = _scores(120, seed=1)
    ranked = rank_units(s)
    perms = next(permutation_rows(len(y), 40, seed=3))
    permuted = y[perms]
    for name in ("auprc", "f1", "pearson", "auc"):
        null = METRICS[name].null(ranked, permuted, 0.1)
        for u in range(6):
            for m in range(0, 40, 7):
                if name in ("auprc", "f1"):
                    # Read as rank positions: unit u's m-th permutation labels its order.
                    labels = np.empty_like(y)
                    labels[ranked.order[u]] = permuted[m]
                else:
                    labels = permuted[m]
                one = rank_units(s[:, [u]])
                expected = METRICS[name].observe(one, labels, 0.1)[0]
                assert null[m, u] == pytest.approx(expected, abs=1e-9), (name, u, m)


def test_permutation_p_values_detector_constant_and_uniform_under_the_null() -> None:
    rng = np.random.default_rng(0)
    n = 200
    y = rng.random((n, 2)) < 0.3
    s = rng.normal(size=(n, 150))
    s[:, 0] = y[:, 0] + 0.01 * rng.normal(size=n)  # perfect for concept 0
    s[:, 1] = 1.5  # constant
    ranked = rank_units(s)
    observed = np.stack([METRICS["auprc"].observe(ranked, y[:, c], 0.1) for c in range(2)], 1)

    def test(seed: int, cap: int | None) -> Permuted:
        return permutation_test(
            ranked, y, observed, METRICS["auprc"], permutations=1000, seed=seed, fire=0.1, cap=cap
        )

    one = test(0, 1000)  # a single round
    assert one.p[0, 0] == pytest.approx(1 / 1001)
    assert one.p[1].tolist() == [1.0, 1.0]  # a constant scores the same under every permutation
    assert one.null_mean[1, 0] == pytest.approx(y[:, 0].mean(), abs=1e-9)  # AP of a tie
    # The random units: p-values spread over (0, 1], about 5% below 0.05.
    noise = one.p[2:].ravel()
    assert 0.01 < (noise < 0.05).mean() < 0.1 and 0.4 < np.median(noise) < 0.6
    # 300 tests: 1/1001 is no discovery after Benjamini-Hochberg (300/1001 > 0.05) ...
    assert benjamini_hochberg(one.p)[0, 0] > 0.05
    # ... so the detector, which no permutation reaches, gets rounds of ten times more
    # permutations until it is one; the other tests stop after the first round.
    seq = test(0, None)
    assert seq.cap == 2 * 300 * 20 and seq.permutations[0, 0] == 10_000
    assert seq.p[0, 0] == pytest.approx(1 / 10_001)
    assert benjamini_hochberg(seq.p)[0, 0] <= 0.05 and (benjamini_hochberg(seq.p)[2:] > 0.05).all()
    reached = one.p[2:] > 1 / 1001
    assert (seq.permutations[2:][reached] == 1000).all()
    assert np.array_equal(seq.p[2:][reached], one.p[2:][reached])
    # Seeded: the same p-values again; another seed, other permutations.
    assert np.array_equal(test(0, None).p, seq.p) and not np.array_equal(test(1, None).p, seq.p)


def test_sequential_rounds_keep_the_p_values_valid_under_the_null() -> None:
    # Pure noise, many tests: the tests no permutation reaches get more permutations, and
    # Benjamini-Hochberg still finds nothing.
    rng = np.random.default_rng(5)
    n = 100
    y = rng.random((n, 4)) < 0.3
    ranked = rank_units(rng.normal(size=(n, 100)))
    observed = np.stack([METRICS["auprc"].observe(ranked, y[:, c], 0.1) for c in range(4)], 1)
    seq = permutation_test(
        ranked, y, observed, METRICS["auprc"], permutations=1000, seed=0, fire=0.1
    )
    assert (benjamini_hochberg(seq.p) > 0.05).all()
    assert seq.permutations.max() <= seq.cap


def test_benjamini_hochberg_equals_its_definition() -> None:
    rng = np.random.default_rng(4)
    p = rng.random(50) ** 3
    p[[3, 17]] = np.nan
    q = benjamini_hochberg(p)
    valid = np.flatnonzero(np.isfinite(p))
    m = valid.size
    for i in valid:
        # q_i = min over p_j >= p_i of p_j * m / rank_j
        candidates = [p[j] * m / (np.sum(p[valid] <= p[j])) for j in valid if p[j] >= p[i]]
        assert q[i] == pytest.approx(min(1.0, min(candidates)))
    assert np.isnan(q[[3, 17]]).all()


@pytest.mark.parametrize("name", ["auprc", "f1", "pearson"])
def test_sane_metrics_fall_when_labels_go_missing_or_extra_ones_come(name: str) -> None:
    # A good but imperfect unit; the concept holds a tenth of the images, --fire's share.
    rng = np.random.default_rng(0)
    n = 1000
    y = np.zeros(n, dtype=bool)
    y[rng.choice(n, 100, replace=False)] = True
    s = 2.5 * y + rng.normal(size=n)
    drops = [relabelled_drop(name, s, y, fire=0.1, seed=seed) for seed in range(5)]
    for check in ("missing", "extra"):
        assert min(d[check] for d in drops) > 0.2, (name, check, drops)


def test_auc_does_not_pass_the_missing_labels_check() -> None:
    # Why AUC is not the default: for a rare concept (2% of the images), half its positives
    # turned into negatives are a handful among a thousand negatives, and AUC barely moves,
    # while AUPRC falls by about half of its way to chance.
    rng = np.random.default_rng(0)
    n = 1000
    y = np.zeros(n, dtype=bool)
    y[rng.choice(n, 20, replace=False)] = True
    s = 4.0 * y + rng.normal(size=n)
    auc = relabelled_drop("auc", s, y, seed=0)
    auprc = relabelled_drop("auprc", s, y, seed=0)
    assert auc["missing"] < 0.05 < 0.3 < auprc["missing"]
    assert METRICS["auc"].sane is False and all(METRICS[m].sane for m in ("auprc", "f1", "pearson"))


def test_top_values_keep_the_exact_quantile_of_a_stream() -> None:
    import torch

    rng = np.random.default_rng(0)
    maps = rng.gamma(1.0, size=(50, 4, 7, 7)).astype(np.float32)
    maps[:, 3] = 0.0  # a dead unit
    k = 13
    top = TopValues.empty(4, k)
    for first in range(0, 50, 8):
        units, values = top.candidates(torch.from_numpy(maps[first : first + 8]))
        top.merge(units, values)
    every = maps.transpose(1, 0, 2, 3).reshape(4, -1)
    brute = -np.sort(-every, axis=1)
    for kk in (1, 5, 13):
        assert np.array_equal(top.thresholds(kk), brute[:, kk - 1])
    # Far fewer values kept than seen.
    assert top.merged < every.size / 3


def test_probe_recovers_a_linear_concept_from_its_features_not_from_noise() -> None:
    rng = np.random.default_rng(0)
    n = 200
    y = rng.random((n, 2)) < 0.3
    features = rng.normal(size=(n, 20))
    features[:, 0] += 3.0 * y[:, 0]  # concept 0 is in the features, concept 1 is not
    auprc = probe_auprc(features, y, seed=0)
    assert auprc[0] > 0.9
    assert abs(auprc[1] - y[:, 1].mean()) < 0.15
    assert np.array_equal(probe_auprc(features, y, seed=0), auprc)  # seeded
