"""Tests of actviz.statistics.running and actviz.statistics.sketch: running summaries equal the
pooled ones, whatever the order, in bounded memory."""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actviz.statistics import (
    FLAG_KINDS,
    STAT_FIELDS,
    WORST,
    Flag,
    LayerStats,
    RunningLayer,
    RunningStats,
    Sketch,
    Thresholds,
    find_flags,
    first_bad_layer,
    flag_anomalies,
    flag_counts,
)
from tests.conftest import layer_stats
from tests.oracles import aggregate, aggregate_run, to_json

NAN = math.nan
Layers = list[tuple[str, LayerStats]]


def make_stats(
    rng: np.random.Generator,
    *,
    mean: float,
    std: float,
    channels: int,
    per_channel: int = 16,
    nan: int = 0,
    inf: int = 0,
    dead: tuple[int, ...] = (),
) -> LayerStats:
    finite = channels * per_channel - nan - inf
    if finite == 0:
        mean = std = NAN
    return layer_stats(
        mean=mean,
        std=std,
        channels=channels,
        per_channel=per_channel,
        dead=dead,
        nan=nan,
        inf=inf,
        spread=3.0,
        tails=2.3,
        zero_frac=float(rng.uniform(0, 0.5)) if finite else 0.0,
        neg_frac=float(rng.uniform(0, 1)) if finite else 0.0,
    )


def all_zero(channels: int) -> LayerStats:
    return layer_stats(
        mean=0.0,
        std=0.0,
        channels=channels,
        per_channel=16,
        dead=tuple(range(channels)),
        zero_frac=1.0,
        neg_frac=0.0,
    )


def random_image(rng: np.random.Generator) -> Layers:
    """Five to seven layers with every kind of flag now and then, a vector layer, a layer
    whose channel count varies and layers only some images have."""
    roll = rng.uniform(size=8)
    layers: Layers = []
    nan = int(rng.integers(1, 20)) if roll[0] < 0.1 else 0
    inf = int(rng.integers(1, 20)) if roll[1] < 0.1 else 0
    if roll[0] < 0.03:
        nan, inf = 128, 0  # nothing finite at all
    scale = float(rng.lognormal(0, 0.5))
    layers.append(
        (
            "conv1",
            make_stats(
                rng,
                mean=float(rng.normal(0, scale)),
                std=scale,
                channels=8,
                nan=nan,
                inf=inf,
            ),
        )
    )
    if roll[2] < 0.5:
        channels = 4 if roll[3] < 0.8 else 6  # a few images disagree: not pooled
        odd = make_stats(rng, mean=float(rng.normal()), std=1.0, channels=channels)
        layers.append(("odd", odd))
    if roll[4] < 0.1:
        relu = all_zero(8)
    else:
        k = int(rng.integers(0, 8))
        dead = tuple(sorted(int(i) for i in rng.choice(8, size=k, replace=False)))
        relu = make_stats(
            rng, mean=abs(float(rng.normal(0.5, 0.2))), std=0.5, channels=8, dead=dead
        )
    layers.append(("relu", relu))
    growth = float(rng.choice([1.0, 1.0, 1.0, 150.0, 1e-3]))
    layers.append(("conv2", make_stats(rng, mean=0.1 * growth, std=growth, channels=8)))
    if roll[5] < 0.1:
        fc = make_stats(rng, mean=2.5, std=0.0, channels=10, per_channel=1)  # constant
    else:
        fc = make_stats(rng, mean=float(rng.normal()), std=1.0, channels=10, per_channel=1)
    layers.append(("fc", fc))
    if roll[6] < 0.3:
        layers.append(("extra", make_stats(rng, mean=0.0, std=2.0, channels=10, per_channel=1)))
    return layers


def random_run(seed: int, n: int) -> dict[str, Layers]:
    rng = np.random.default_rng(seed)
    return {f"img{i:04d}": random_image(rng) for i in range(n)}


def running(per_image: dict[str, Layers], keys: list[str] | None = None) -> RunningStats:
    stats = RunningStats()
    for key in keys if keys is not None else list(per_image):
        stats.add_image(key, per_image[key], Thresholds())
    return stats


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def assert_same_stats(got: LayerStats, want: LayerStats, rel: float = 1e-9) -> None:
    for name in STAT_FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert close(float(a), float(b), rel), (name, a, b)
    assert got.dead_indices == want.dead_indices


# -- Sketch ------------------------------------------------------------------------------------


def spread_values(rng: np.random.Generator, n: int = 10_000) -> np.ndarray:
    values = np.concatenate(
        [
            rng.normal(0.0, 3.0, n // 2),
            -rng.lognormal(0.0, 2.0, n // 4),
            rng.lognormal(1.0, 1.5, n // 5),
            np.zeros(n - n // 2 - n // 4 - n // 5),
        ]
    )
    rng.shuffle(values)
    return values


def test_sketch_quantiles_within_one_percent() -> None:
    values = spread_values(np.random.default_rng(0))
    sketch = Sketch()
    for v in values:
        sketch.add(float(v))
    assert sketch.count == values.size
    for q in (0.0, 0.001, 0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99, 0.999, 1.0):
        exact = float(np.quantile(values, q, method="lower"))
        got = sketch.quantile(q)
        assert abs(got - exact) <= 0.01 * abs(exact) * (1 + 1e-9), (q, got, exact)
    # The zeros (a tenth of the values) come back as exactly 0.
    zeros = (values < 0).mean() + 0.01
    assert sketch.quantile(float(zeros)) == 0.0


def test_sketch_is_order_independent_and_round_trips() -> None:
    rng = np.random.default_rng(1)
    values = [float(v) for v in spread_values(rng, 3000)] + [NAN, math.inf, -math.inf]
    one = Sketch()
    for v in values:
        one.add(v)
    assert one.count == 3000  # NaN and the infinities are not counted
    parts = [Sketch() for _ in range(3)]
    shuffled = list(values)
    rng.shuffle(shuffled)
    for i, v in enumerate(shuffled):
        parts[i % 3].add(v)
    merged = Sketch()
    for part in reversed(parts):
        merged.merge(part)
    assert merged == one
    assert merged.to_dict() == one.to_dict()
    again = Sketch.from_dict(json.loads(json.dumps(one.to_dict())))
    assert again == one
    assert again.quantile(0.37) == one.quantile(0.37)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=60),
    st.randoms(use_true_random=False),
    st.integers(1, 40),
)
def test_sketch_state_depends_on_the_values_only(values: list[float], rnd: Any, cap: int) -> None:
    one = Sketch(max_buckets=cap)
    for v in values:
        one.add(v)
    shuffled = list(values)
    rnd.shuffle(shuffled)
    cut = rnd.randint(0, len(shuffled))
    left, right = Sketch(max_buckets=cap), Sketch(max_buckets=cap)
    for v in shuffled[:cut]:
        left.add(v)
    for v in shuffled[cut:]:
        right.add(v)
    right.merge(left)
    assert right == one
    assert one.count == sum(1 for v in values if math.isfinite(v))
    state = one.to_dict()
    assert len(state["positive"]) <= cap and len(state["negative"]) <= cap


def test_sketch_empty_and_invalid() -> None:
    sketch = Sketch()
    sketch.add(NAN)
    assert sketch.count == 0
    assert math.isnan(sketch.quantile(0.5))
    with pytest.raises(ValueError, match="between 0 and 1"):
        sketch.quantile(1.5)
    with pytest.raises(ValueError, match="same alpha"):
        sketch.merge(Sketch(alpha=0.02))
    sketch.add(-7.0)
    assert sketch.quantile(0.0) == sketch.quantile(1.0) == pytest.approx(-7.0, rel=0.01)


def test_sketch_size_is_capped_and_collapse_is_order_independent() -> None:
    rng = np.random.default_rng(2)
    # Magnitudes over 1e-150 .. 1e150: far more than 256 buckets' worth (a 165-fold range).
    signs = rng.choice([-1, 1], 4000)
    values = [float(s * 10.0**e) for s, e in zip(signs, rng.uniform(-150, 150, 4000), strict=True)]
    one = Sketch(max_buckets=256)
    for v in values:
        one.add(v)
    state = one.to_dict()
    assert len(state["positive"]) <= 256 and len(state["negative"]) <= 256
    assert one.count == 4000
    # The largest magnitudes keep their accuracy; the smallest were folded upwards.
    for q in (0.0, 0.001, 0.999, 1.0):
        exact = float(np.quantile(values, q, method="lower"))
        assert abs(one.quantile(q) - exact) <= 0.01 * abs(exact) * (1 + 1e-9)
    rng.shuffle(values)
    halves = Sketch(max_buckets=256), Sketch(max_buckets=256)
    for i, v in enumerate(values):
        halves[i % 2].add(v)
    halves[1].merge(halves[0])
    assert halves[1] == one
    assert Sketch.from_dict(state) == one


# -- RunningLayer ------------------------------------------------------------------------------


def test_running_layer_equals_aggregate() -> None:
    per_image = random_run(3, 200)
    for name in ("conv1", "relu", "conv2", "fc", "extra"):
        group = [s for layers in per_image.values() for n, s in layers if n == name]
        layer = RunningLayer()
        for s in group:
            layer.add(s)
        result = layer.result()
        assert result is not None
        assert_same_stats(result, aggregate(group))
        assert layer.images == len(group)
    # Some NaN-only images: their moments stay out, their counts are in.
    conv1 = [layers[0][1] for layers in per_image.values()]
    assert any(s.finite == 0 for s in conv1) and any(s.nan and s.finite for s in conv1)


def test_running_layer_variance_is_stable_and_exact() -> None:
    rng = np.random.default_rng(4)
    # Means far from zero with a tiny spread: E[x^2] - E[x]^2 would lose every digit.
    group = [
        make_stats(rng, mean=1e6 + float(rng.normal(0, 1e-3)), std=1e-3, channels=4)
        for _ in range(300)
    ]
    layer = RunningLayer()
    for s in group:
        layer.add(s)
    result = layer.result()
    assert result is not None
    assert_same_stats(result, aggregate(group))
    assert 1e-3 < result.std < 2e-3


def test_running_layer_dead_and_channels() -> None:
    rng = np.random.default_rng(5)
    layer = RunningLayer()
    layer.add(make_stats(rng, mean=1.0, std=1.0, channels=4, dead=(0, 1, 3)))
    layer.add(make_stats(rng, mean=1.0, std=1.0, channels=4, dead=(1, 3)))
    other = RunningLayer()
    other.add(make_stats(rng, mean=1.0, std=1.0, channels=4, dead=(0, 3)))
    layer.merge(other)
    result = layer.result()
    assert result is not None
    assert (result.dead_indices, result.dead_channels, result.dead_frac) == ((3,), 1, 0.25)
    assert RunningLayer().result() is None
    odd = RunningLayer()
    odd.add(make_stats(rng, mean=1.0, std=1.0, channels=4))
    mixed = RunningLayer()
    mixed.add(make_stats(rng, mean=1.0, std=1.0, channels=5))
    odd.merge(mixed)
    assert odd.result() is None  # as aggregate_run leaves such a layer out
    empty = RunningLayer()
    empty.add(make_stats(rng, mean=0.0, std=0.0, channels=4, nan=64))
    nothing = empty.result()
    assert nothing is not None and nothing.nan == 64
    assert math.isnan(nothing.mean) and math.isnan(nothing.std) and math.isnan(nothing.p99)


def test_running_layer_across_images() -> None:
    rng = np.random.default_rng(6)
    means = rng.uniform(-2, 5, 501)
    layer = RunningLayer()
    for m in means:
        layer.add(make_stats(rng, mean=float(m), std=1.0, channels=4))
    across = layer.across_images()
    assert set(across) == {"mean", "rms", "max", "dead_frac"}
    for key, q in (("p01", 0.01), ("p50", 0.5), ("p99", 0.99)):
        # Interpolated between the two nearest images, as numpy's default: each within 1 %.
        want = float(np.quantile(means, q))
        near = max(abs(float(np.quantile(means, q, method=m))) for m in ("lower", "higher"))
        got = across["mean"][key]
        assert got is not None and abs(got - want) <= 0.0101 * near
    assert across["dead_frac"] == {"p01": 0.0, "p50": 0.0, "p99": 0.0}


def test_across_images_below_101_images_interpolates() -> None:
    # With fewer than 101 images the 1st percentile by rank is the smallest value and the
    # 99th the second largest; interpolated, they lie between the two nearest images.
    rng = np.random.default_rng(7)
    means = [1.0, 2.0, 3.0, 4.0, 10.0]
    layer = RunningLayer()
    for m in means:
        layer.add(make_stats(rng, mean=m, std=1.0, channels=4))
    across = layer.across_images()["mean"]
    for key, q in (("p01", 0.01), ("p50", 0.5), ("p99", 0.99)):
        want = float(np.quantile(means, q))
        got = across[key]
        assert got is not None and abs(got - want) <= 0.0101 * want, (key, got, want)
    assert across["p99"] > 4.0 * 1.02  # well past the second largest
    assert across["p01"] < across["p50"] < across["p99"]
    sketch = Sketch()
    for v in (5.0, 1.0):
        sketch.add(v)
    assert sketch.quantile(0.5) == pytest.approx(1.0, rel=0.01)
    assert sketch.quantile(0.5, interpolate=True) == pytest.approx(3.0, rel=0.01)
    assert sketch.quantile(1.0, interpolate=True) == pytest.approx(5.0, rel=0.01)


# -- Flag severity -----------------------------------------------------------------------------


def test_flag_severity() -> None:
    rng = np.random.default_rng(7)
    layers = [
        ("a", make_stats(rng, mean=0.0, std=1.0, channels=4, nan=8, inf=16)),
        ("b", make_stats(rng, mean=1.0, std=1.0, channels=4, dead=(0, 1, 2))),
        ("c", make_stats(rng, mean=0.0, std=50.0, channels=4)),
        ("d", make_stats(rng, mean=0.0, std=0.5, channels=4)),
        ("e", make_stats(rng, mean=3.0, std=0.0, channels=4)),
    ]
    flags = {(f.layer, f.kind): f for f in flag_anomalies(layers)}
    assert flags["a", "nan"].severity == pytest.approx(8 / 64)
    assert flags["a", "inf"].severity == pytest.approx(16 / 64)
    assert flags["b", "dead"].severity == 0.75
    rms_b = math.sqrt(2.0)
    assert flags["c", "exploding"].severity == pytest.approx(50.0 / rms_b)
    assert flags["d", "vanishing"].severity == pytest.approx(50.0 / 0.5)
    assert flags["e", "constant"].severity == 1.0
    # The written form of a flag is unchanged, and severity is no part of its identity.
    assert flags["b", "dead"].to_dict() == {
        "layer": "b",
        "kind": "dead",
        "message": "3 of 4 channels never positive (75%)",
    }
    assert Flag("b", "dead", "m", 0.5) == Flag("b", "dead", "m")
    assert [f.name for f in fields(Flag)][-1] == "severity"


# -- RunningStats ------------------------------------------------------------------------------


def brute_worst(flags_by_image: dict[str, list[Flag]], kind: str) -> list[tuple[str, str, str]]:
    best: list[tuple[float, str, str, str]] = []
    for image, flags in flags_by_image.items():
        of_kind = [f for f in flags if f.kind == kind]
        if of_kind:
            top = max(of_kind, key=lambda f: f.severity)  # the first of the most severe
            best.append((-top.severity, image, top.layer, top.message))
    return [(image, layer, message) for _, image, layer, message in sorted(best)[:WORST]]


def test_running_stats_equal_format_one() -> None:
    per_image = random_run(8, 300)
    stats = RunningStats()
    flags_by_image = {}
    for key, layers in per_image.items():
        flags_by_image[key] = stats.add_image(key, layers, Thresholds())
        assert flags_by_image[key] == flag_anomalies(layers)
    run = aggregate_run(per_image)
    pooled = stats.pooled()
    assert (
        [name for name, _ in pooled]
        == [name for name, _ in run]
        == [
            "conv1",
            "relu",
            "conv2",
            "fc",
            "extra",
        ]
    )  # "odd" disagrees on its channel count: left out of both
    for (_, got), (_, want) in zip(pooled, run, strict=True):
        assert_same_stats(got, want)

    old = to_json(per_image, run)
    doc = stats.to_json(Thresholds())
    json.dumps(doc, allow_nan=False)
    assert doc["format"] == 2 and doc["flag_kinds"] == list(FLAG_KINDS)
    assert doc["thresholds"] == old["thresholds"]
    assert doc["images"] == {
        "count": 300,
        "flagged": sum(1 for f in flags_by_image.values() if f),
        "table": "stats.parquet",
        "csv": "stats.csv",
    }
    for key, section in old["images"].items():
        assert section["flags"] == [f.to_dict() for f in flags_by_image[key]]
    assert doc["run"]["flags"] == old["run"]["flags"]
    assert doc["run"]["first_nonfinite"] == old["run"]["first_nonfinite"]
    for new_layer, old_layer in zip(doc["run"]["layers"], old["run"]["layers"], strict=True):
        for key, value in old_layer.items():
            if isinstance(value, float):
                assert close(new_layer[key], value, 1e-6), (key, new_layer[key], value)
            else:
                assert new_layer[key] == value
        name = new_layer["name"]
        having = [k for k, layers in per_image.items() if name in dict(layers)]
        assert new_layer["images"] == len(having)
        flagged = {
            kind: sum(
                1
                for k in having
                if any(f.layer == name and f.kind == kind for f in flags_by_image[k])
            )
            for kind in FLAG_KINDS
        }
        assert new_layer["flagged"] == flagged
        means = [dict(per_image[k])[name].mean for k in having]
        finite = [m for m in means if math.isfinite(m)]
        p50 = float(np.quantile(finite, 0.5))
        near = max(abs(float(np.quantile(finite, 0.5, method=m))) for m in ("lower", "higher"))
        assert abs(new_layer["across_images"]["mean"]["p50"] - p50) <= 0.0101 * near

    # Flag counts per kind, per layer and kind, the worst images, where non-finite starts.
    assert doc["flags"]["images"] == flag_counts(old) == flag_counts(doc)
    assert all(doc["flags"]["images"][kind] > 0 for kind in FLAG_KINDS)
    want_layers = []
    for name in ["conv1", "odd", "relu", "conv2", "fc", "extra"]:
        for kind in FLAG_KINDS:
            hits = [
                k
                for k, flags in flags_by_image.items()
                if any(f.layer == name and f.kind == kind for f in flags)
            ]
            if hits:
                want_layers.append(
                    {"layer": name, "kind": kind, "images": len(hits), "first": min(hits)}
                )
    assert doc["flags"]["layers"] == want_layers
    for kind in FLAG_KINDS:
        got = [(e["image"], e["layer"], e["message"]) for e in doc["flags"]["worst"][kind]]
        assert got == brute_worst(flags_by_image, kind)
        severities = [e["severity"] for e in doc["flags"]["worst"][kind]]
        assert severities == sorted(severities, reverse=True)
    first_bad = {}
    for key, flags in flags_by_image.items():
        bad = first_bad_layer(flags)
        if bad is not None:
            first_bad.setdefault(bad, []).append(key)
    assert doc["flags"]["first_nonfinite"] == [
        {"layer": name, "images": len(keys), "first": min(keys)}
        for name in ["conv1", "odd", "relu", "conv2", "fc", "extra"]
        if (keys := first_bad.get(name))
    ]


def test_running_stats_order_and_split_independent() -> None:
    per_image = random_run(9, 200)
    keys = list(per_image)
    want = running(per_image, keys).to_json(Thresholds())
    rng = np.random.default_rng(10)
    shuffled = [str(k) for k in rng.permutation(keys)]
    assert running(per_image, shuffled).to_json(Thresholds()) == want
    parts = [running(per_image, shuffled[i::3]) for i in range(3)]
    merged = RunningStats()
    for part in (parts[2], parts[0], parts[1]):
        merged.merge(pickle.loads(pickle.dumps(part)))  # as from a Ray actor
    assert merged.to_json(Thresholds()) == want
    assert merged.images == 200


def test_layer_order_is_that_of_the_smallest_key() -> None:
    rng = np.random.default_rng(11)
    s = make_stats(rng, mean=1.0, std=1.0, channels=4)
    per_image = {"b": [("x", s), ("y", s)], "a": [("y", s), ("z", s)], "c": [("w", s)]}
    stats = RunningStats()
    for key in ("c", "b", "a"):
        stats.add_image(key, per_image[key])
    want = [name for name, _ in aggregate_run(dict(sorted(per_image.items())))]
    assert [name for name, _ in stats.pooled()] == want == ["y", "z", "x", "w"]


def test_empty_run_and_images_without_layers() -> None:
    stats = RunningStats()
    assert stats.add_image("a", []) == []
    doc = stats.to_json(Thresholds(), csv=None)
    assert doc["run"] is None
    assert doc["images"] == {"count": 0, "flagged": 0, "table": "stats.parquet", "csv": None}
    assert doc["flags"]["images"] == dict.fromkeys(FLAG_KINDS, 0)
    assert doc["flags"]["worst"] == {kind: [] for kind in FLAG_KINDS}
    # One image: the run is that image.
    rng = np.random.default_rng(12)
    layers = [("a", make_stats(rng, mean=1.0, std=1.0, channels=4, nan=3))]
    stats.add_image("only", layers)
    one = stats.to_json(Thresholds())
    assert one["run"]["layers"][0]["nan"] == 3
    assert one["run"]["first_nonfinite"] == "a"


def test_find_flags_reads_both_formats() -> None:
    per_image = random_run(13, 60)
    stats = running(per_image)
    old = to_json(per_image, aggregate_run(per_image))
    new = json.loads(json.dumps(stats.to_json(Thresholds())))
    found = find_flags(new, {"nan", "dead"})
    assert [k for k, f in found if f.kind == "nan"] == [k for k, _ in stats.worst("nan")]
    assert {(k, f.kind) for k, f in found} <= {
        (k, f.kind) for k, f in find_flags(old, {"nan", "dead"})
    }
    assert all(f.severity > 0 for _, f in found)
    assert find_flags(new, set()) == []
    counts = flag_counts(old)
    assert counts == flag_counts(new) and set(counts) == set(FLAG_KINDS)
    assert counts["nan"] == sum(
        1 for s in old["images"].values() if any(f["kind"] == "nan" for f in s["flags"])
    )


def test_memory_does_not_grow_with_images() -> None:
    rng = np.random.default_rng(14)
    stats = RunningStats()
    sizes = {}
    for i in range(5000):
        dead = tuple(
            sorted(int(c) for c in rng.choice(8, size=int(rng.integers(0, 8)), replace=False))
        )
        jitter = float(rng.uniform(1.0, 1.1))
        layers = [
            ("a", make_stats(rng, mean=float(rng.uniform(0.5, 2)), std=1.0, channels=8, dead=dead)),
            (
                "b",
                make_stats(rng, mean=-1.0, std=float(rng.choice([1.0, 40.0])) * jitter, channels=8),
            ),
            (
                "c",
                make_stats(
                    rng, mean=0.0, std=float(rng.choice([1.0, 0.01])), channels=8, nan=i % 7
                ),
            ),
        ]
        stats.add_image(f"img{i:05d}", layers)
        if i + 1 in (500, 5000):
            sizes[i + 1] = len(pickle.dumps(stats))
    assert stats.images == 5000
    for kind in ("nan", "dead", "exploding", "vanishing"):
        assert len(stats.worst(kind)) == WORST
    # What is kept per layer and kind is all there is: 10 times the images, the same size.
    assert abs(sizes[5000] - sizes[500]) < 0.1 * sizes[500], sizes
    # And a layer whose values spread over every magnitude stays within the sketches' cap.
    layer = RunningLayer()
    for e in rng.uniform(-100, 100, 3000):
        layer.add(make_stats(rng, mean=-(10.0**e), std=10.0**e, channels=4))
    for sketch in layer.sketches.values():
        state = sketch.to_dict()
        assert len(state["positive"]) <= sketch.max_buckets >= len(state["negative"])
    assert len(pickle.dumps(layer)) < 4 * 2 * sketch.max_buckets * 16
