"""label's statistics and tcav's vectors, against the direct ways of computing them.

1. Beyond the forward pass: labels for 512 channels and 20 tags over 2,000 images with 1,000
   permutations (and the rounds that Benjamini-Hochberg needs past them), plus the
   learnability probes: everything ``actviz label`` does once the scores are gathered, on
   synthetic scores (the forward pass is the model's, not label's; these scores have the
   shape of a ResNet's ``layer4`` after a spatial max: non-negative, a few units planted to
   follow a tag). Timed whole, against the direct recipe (scikit-learn's
   ``average_precision_score`` per unit, concept and permutation) timed on a slice and scaled
   to the whole: looping it in full would take hours. Target: under a minute on 2 cores.
2. FastCAV against a linear SVM concept vector (scikit-learn's ``SGDClassifier`` with the
   hinge loss, as TCAV and captum train it), over 20 runs on activations of 2,048 channels:
   the time to find the vectors, and the TCAV scores each gives. Target: at least 20x faster,
   scores within 0.05.

    python benchmarks/bench_label.py [--images 2000] [--units 512] [--tags 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def synthetic_scores(
    images: int, units: int, tags: int, planted: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative scores (``relu`` of normals: about a tenth exactly 0, as a ReLU layer's
    spatial max on some images), tags of 2-30% prevalence, and ``planted`` units following
    one tag each."""
    rng = np.random.default_rng(seed)
    labels = rng.random((images, tags)) < rng.uniform(0.02, 0.3, size=tags)
    scores = np.maximum(rng.normal(loc=1.3, size=(images, units)), 0.0)
    for u in range(planted):
        scores[:, u] += 1.5 * labels[:, u % tags]
    return scores.astype(np.float32), labels


def bench_labels(args: argparse.Namespace) -> dict[str, float]:
    from sklearn.metrics import average_precision_score

    from actviz.label.analysis import analyse_layer, testable_concepts
    from actviz.label.options import LabelOptions
    from actviz.label.probe import probe_auprc

    scores, labels = synthetic_scores(args.images, args.units, args.tags, args.planted)
    names = [f"tag{k}" for k in range(args.tags)]
    opts = LabelOptions(tags="tags.csv", permutations=1000)
    pixels = np.random.default_rng(1).normal(size=(args.images, 192))
    start = time.perf_counter()
    untestable = testable_concepts(labels, opts.min_positives)
    layer = analyse_layer("layer4", scores, labels, names, untestable, opts)
    tested = time.perf_counter() - start
    probe_auprc(scores, labels, seed=0)
    probe_auprc(pixels, labels, seed=0)
    ours = time.perf_counter() - start
    # The direct recipe on a slice: every permutation of 4 units and 2 concepts, scaled.
    rng = np.random.default_rng(0)
    sliced_units, sliced_tags, sliced_perms = 4, 2, 25
    begin = time.perf_counter()
    for k in range(sliced_tags):
        for _ in range(sliced_perms):
            permuted = rng.permutation(labels[:, k])
            for u in range(sliced_units):
                average_precision_score(permuted, scores[:, u])
    per_call = (time.perf_counter() - begin) / (sliced_units * sliced_tags * sliced_perms)
    calls = args.units * args.tags * 1000
    direct = per_call * calls
    used = int(layer.permutations.sum())
    print(
        f"labels, {args.units} units x {args.tags} tags x {args.images} images, 1000 "
        f"permutations (+ rounds): {ours:.1f} s in all ({tested:.1f} s the tests, "
        f"{ours - tested:.1f} s the probes); {layer.labelled_units} units labelled "
        f"({args.planted} planted), {layer.labelled.sum()} labels"
    )
    print(
        f"  permutations scored: {used:,} ({used / (args.units * args.tags):.0f} a test on "
        f"average; the most {int(layer.permutations.max()):,})"
    )
    print(
        f"  scikit-learn's average_precision_score per unit, tag and permutation: "
        f"{per_call * 1e3:.2f} ms a call, {calls:,} calls for 1,000 permutations = "
        f"{direct / 3600:.1f} h (scaled from {sliced_units * sliced_tags * sliced_perms} calls)"
    )
    print(
        f"  ratio: {direct / ours:.0f}x faster than the direct recipe; target < 60 s: "
        f"{'met' if ours < 60 else 'MISSED'}"
    )
    return {"label_seconds": ours, "label_ratio": direct / ours}


def bench_cavs(args: argparse.Namespace) -> dict[str, float]:
    from actviz.tcav.cav import fast_cav, linear_cav, tcav_scores

    rng = np.random.default_rng(3)
    channels, runs = args.channels, 20
    # Activations of a deep layer: non-negative, correlated channels (a low-rank part), the
    # concept shifting a few dozen of them.
    basis = rng.normal(size=(64, channels))
    direction = np.zeros(channels)
    direction[rng.choice(channels, 40, replace=False)] = 1.0

    def activations(n: int, concept: bool) -> np.ndarray:
        a = rng.normal(size=(n, 64)) @ basis / 8 + rng.normal(size=(n, channels))
        return np.maximum(a + (1.2 * direction if concept else 0), 0.0)

    concept = activations(args.concept_images, True)
    randoms = activations(2 * args.concept_images * 2, False)
    grads = rng.normal(size=(200, channels)) + 0.05 * direction
    size = args.concept_images
    timings = {"fast": 0.0, "linear": 0.0}
    scores: dict[str, list[float]] = {"fast": [], "linear": []}
    for r in range(runs):
        order = np.random.default_rng([r]).permutation(len(randoms))
        negatives = randoms[order[:size]]
        for name, train in (("fast", fast_cav), ("linear", linear_cav)):
            begin = time.perf_counter()
            v = train(concept, negatives, r)
            timings[name] += time.perf_counter() - begin
            score, _ = tcav_scores(grads, v[None, :])
            scores[name].append(float(score[0]))
    ratio = timings["linear"] / timings["fast"]
    gap = abs(np.mean(scores["fast"]) - np.mean(scores["linear"]))
    print(
        f"concept vectors, {runs} runs, {channels} channels, {size} concept images against "
        f"{size} random ones: FastCAV {timings['fast'] * 1e3 / runs:.2f} ms a vector, linear "
        f"SVM (SGD) {timings['linear'] * 1e3 / runs:.1f} ms: {ratio:.0f}x faster (target 20x: "
        f"{'met' if ratio >= 20 else 'MISSED'})"
    )
    print(
        f"  mean TCAV score: FastCAV {np.mean(scores['fast']):.3f}, linear SVM "
        f"{np.mean(scores['linear']):.3f}: {gap:.3f} apart (target within 0.05: "
        f"{'met' if gap <= 0.05 else 'MISSED'}); largest run-by-run gap "
        f"{np.max(np.abs(np.subtract(scores['fast'], scores['linear']))):.3f}"
    )
    return {"cav_ratio": ratio, "cav_gap": gap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--units", type=int, default=512)
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--planted", type=int, default=20)
    parser.add_argument("--channels", type=int, default=2048)
    parser.add_argument("--concept-images", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2, help="BLAS threads (2 cores)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(args.threads):
        bench_labels(args)
        bench_cavs(args)


if __name__ == "__main__":
    main()
