"""Tests of actviz.statistics.compute: per-sample statistics, pooling, anomaly flags, CSV and
JSON."""

from __future__ import annotations

import csv
import functools
import io
import json
import math

import numpy as np
import pytest
import torch

from actviz.errors import UsageError
from actviz.statistics import (
    CSV_FIELDS,
    FLAG_KINDS,
    RUN_KEY,
    Flag,
    LayerStats,
    Thresholds,
    find_flags,
    first_bad_layer,
    flag_anomalies,
    parse_kinds,
)
from actviz.statistics.compute import PERCENTILE_EXACT_LIMIT, compute_stats, default_channel_dim
from tests.conftest import layer_stats
from tests.oracles import aggregate, aggregate_run, stats_rows, to_csv, to_json

NAN = float("nan")
INF = float("inf")


# A hand-made LayerStats for the rule tests: 100 values, min and max 2 std from the mean.
stats_of = functools.partial(layer_stats, count=100)


def kinds(flags: list[Flag]) -> list[tuple[str, str]]:
    return [(f.layer, f.kind) for f in flags]


# --------------------------------------------------------------------------- compute_stats


def test_known_values_of_one_map() -> None:
    # Channel 0: 1..4; channel 1: all zero; channel 2: constant -3; channel 3: 0, 0, 5, -5.
    x = torch.tensor(
        [
            [
                [[1.0, 2.0], [3.0, 4.0]],
                [[0.0, 0.0], [0.0, 0.0]],
                [[-3.0, -3.0], [-3.0, -3.0]],
                [[0.0, 0.0], [5.0, -5.0]],
            ]
        ]
    )
    (s,) = compute_stats(x)
    values = x.flatten().double().numpy()
    assert s.count == 16
    assert s.mean == pytest.approx(values.mean())
    assert s.std == pytest.approx(values.std())  # population std
    assert (s.min, s.max) == (-5.0, 5.0)
    assert s.zero_frac == pytest.approx(6 / 16)
    assert s.neg_frac == pytest.approx(5 / 16)
    assert (s.nan, s.inf) == (0, 0)
    assert s.channels == 4
    # The all-zero and the negative constant channel are never positive: dead.
    assert s.dead_indices == (1, 2)
    assert s.dead_channels == 2
    assert s.dead_frac == 0.5
    assert s.p01 == np.percentile(values, 1, method="nearest")
    assert s.p99 == np.percentile(values, 99, method="nearest")


def test_one_entry_per_sample_in_batch_order() -> None:
    x = torch.stack([torch.full((3, 4, 4), 2.0), torch.full((3, 4, 4), -1.0)])
    first, second = compute_stats(x)
    assert (first.mean, first.std, first.dead_channels) == (2.0, 0.0, 0)
    assert (second.mean, second.neg_frac, second.dead_channels) == (-1.0, 1.0, 3)


def test_nan_and_inf_are_counted_and_left_out_of_moments() -> None:
    x = torch.tensor([[[1.0, NAN, 3.0], [INF, -INF, 5.0]]])  # (1, 2, 3), channels at 1
    (s,) = compute_stats(x)
    assert (s.count, s.nan, s.inf, s.finite) == (6, 1, 2, 3)
    assert s.mean == pytest.approx(3.0)
    assert s.std == pytest.approx(math.sqrt(8 / 3))
    assert (s.min, s.max) == (1.0, 5.0)
    assert (s.p01, s.p99) == (1.0, 5.0)
    assert s.neg_frac == pytest.approx(1 / 6)  # -inf is below 0; NaN is not
    assert s.zero_frac == 0.0
    assert s.dead_channels == 0


def test_nonfinite_sample_does_not_disturb_its_neighbours() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 8, 16, 16)
    clean = compute_stats(x)
    x[1, 2, 3, 4] = NAN
    mixed = compute_stats(x)
    assert mixed[0] == clean[0] and mixed[2] == clean[2]
    assert mixed[1].nan == 1
    kept = torch.cat(
        [x[1].flatten()[: 2 * 256 + 3 * 16 + 4], x[1].flatten()[2 * 256 + 3 * 16 + 5 :]]
    )
    assert mixed[1].mean == pytest.approx(float(kept.double().mean()), rel=1e-6)


def test_sample_without_finite_values_gives_nan_not_an_error() -> None:
    x = torch.full((2, 3, 2, 2), NAN)
    x[1] = INF
    first, second = compute_stats(x)
    for s in (first, second):
        assert math.isnan(s.mean) and math.isnan(s.std) and math.isnan(s.p99)
        assert s.dead_channels == 3  # nothing finite is above 0
    assert (first.nan, first.inf, second.nan, second.inf) == (12, 0, 0, 12)


def test_float32_overflow_falls_back_to_float64() -> None:
    x = torch.full((1, 2, 4, 4), 3e38)  # the float32 sum overflows, the values do not
    (s,) = compute_stats(x)
    assert s.mean == pytest.approx(3e38, rel=1e-6)
    assert s.std == pytest.approx(0.0, abs=1e32)
    assert s.inf == 0


def test_all_zero_and_constant_channels() -> None:
    x = torch.zeros(1, 4, 5, 5)
    x[0, 1] = 7.0
    (s,) = compute_stats(x)
    assert s.zero_frac == pytest.approx(0.75)
    assert s.dead_indices == (0, 2, 3)
    assert s.mean == pytest.approx(7 / 4)
    assert s.std == pytest.approx(math.sqrt(0.25 * 49 - (7 / 4) ** 2))


def test_half_dead_relu_layer() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 8, 6, 6).abs() + 0.1
    x[:, ::2] = -x[:, ::2]
    s = compute_stats(torch.relu(x))
    assert [t.dead_indices for t in s] == [(0, 2, 4, 6)] * 2
    assert all(t.dead_frac == 0.5 and t.zero_frac == 0.5 for t in s)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_summarised_in_float32(dtype: torch.dtype) -> None:
    # 256 copies of 100 and 256 of 300: a float16 sum would overflow (65504) and lose digits.
    x = torch.cat([torch.full((256,), 100.0), torch.full((256,), 300.0)]).reshape(1, 2, 16, 16)
    (s,) = compute_stats(x.to(dtype))
    assert s.mean == pytest.approx(200.0)
    assert s.std == pytest.approx(100.0)
    assert (s.min, s.max) == (100.0, 300.0)
    assert s.dead_channels == 0


def test_tokens_layout_uses_the_last_dimension_for_channels() -> None:
    x = torch.ones(2, 5, 3)  # (B, N, C)
    x[:, :, 1] = -1.0
    s = compute_stats(x, channel_dim=-1)
    assert [t.channels for t in s] == [3, 3]
    assert [t.dead_indices for t in s] == [(1,), (1,)]
    assert default_channel_dim(x.shape) == -1
    # Read as (B, C=5, 3), no channel is dead: every token has a positive value.
    assert compute_stats(x, channel_dim=1)[0].dead_channels == 0


def test_nhwc_and_nchw_agree() -> None:
    torch.manual_seed(2)
    nchw = torch.randn(2, 6, 5, 7)
    nchw[:, 3] = -nchw[:, 3].abs()
    a = compute_stats(nchw, channel_dim=1)
    b = compute_stats(nchw.permute(0, 2, 3, 1), channel_dim=-1)
    for sa, sb in zip(a, b, strict=True):
        assert sa.dead_indices == sb.dead_indices == (3,)
        assert sa.mean == pytest.approx(sb.mean)
        assert sa.std == pytest.approx(sb.std)
        assert (sa.p01, sa.p99) == (sb.p01, sb.p99) or sa.count > PERCENTILE_EXACT_LIMIT


def test_channels_last_storage_gives_the_same_statistics() -> None:
    torch.manual_seed(4)
    x = torch.randn(2, 5, 6, 7)
    x[:, 2] = -x[:, 2].abs()
    plain = compute_stats(x)
    stored = compute_stats(x.contiguous(memory_format=torch.channels_last))
    for a, b in zip(plain, stored, strict=True):
        assert b.channels == 5 and b.dead_indices == a.dead_indices == (2,)
        assert b.mean == pytest.approx(a.mean) and b.std == pytest.approx(a.std)
        assert (b.min, b.max, b.zero_frac, b.neg_frac) == (a.min, a.max, a.zero_frac, a.neg_frac)


def test_vectors_and_scalars() -> None:
    v = torch.tensor([[1.0, -2.0, 0.0, 4.0]])
    (s,) = compute_stats(v)
    assert (s.channels, s.per_channel) == (4, 1)
    assert s.dead_indices == (1, 2)
    assert default_channel_dim(v.shape) == 1
    scalars = compute_stats(torch.tensor([3.0, -1.0]))
    assert [t.mean for t in scalars] == [3.0, -1.0]
    assert [t.channels for t in scalars] == [1, 1]


def test_int_and_bool_outputs() -> None:
    (s,) = compute_stats(torch.tensor([[[1, 0], [0, 0]]], dtype=torch.bool))
    assert s.mean == 0.25 and s.zero_frac == 0.75
    (t,) = compute_stats(torch.arange(6).reshape(1, 2, 3))
    assert t.mean == 2.5


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="batch"):
        compute_stats(torch.tensor(1.0))
    with pytest.raises(ValueError, match="complex"):
        compute_stats(torch.zeros(1, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="channel_dim"):
        compute_stats(torch.zeros(1, 2), channel_dim=0)
    assert compute_stats(torch.zeros(0, 3, 4, 4)) == []
    (empty,) = compute_stats(torch.zeros(1, 3, 0, 4))
    assert empty.count == 0 and math.isnan(empty.mean) and empty.channels == 3


def test_percentiles_exact_below_the_limit() -> None:
    rng = np.random.default_rng(0)
    values = rng.standard_normal((3, 50, 40)).astype(np.float32)
    for row, s in zip(values, compute_stats(torch.from_numpy(values)), strict=True):
        assert s.p01 == np.percentile(row, 1, method="nearest")
        assert s.p99 == np.percentile(row, 99, method="nearest")


def test_percentiles_from_a_subsample_above_the_limit_are_close() -> None:
    # 64 x 112 x 112 = 802816 values: above the limit, so a strided subsample is used.
    torch.manual_seed(3)
    x = torch.randn(1, 64, 112, 112)
    (s,) = compute_stats(x)
    values = x.flatten().numpy()
    # Within 0.1 percentile points of the exact percentile.
    assert np.percentile(values, 0.9) <= s.p01 <= np.percentile(values, 1.1)
    assert np.percentile(values, 98.9) <= s.p99 <= np.percentile(values, 99.1)
    assert s.mean == pytest.approx(float(x.double().mean()), abs=1e-6)
    assert s.std == pytest.approx(float(x.double().std(correction=0)), rel=1e-6)


def test_the_input_is_not_modified() -> None:
    x = torch.randn(2, 3, 4, 4)
    before = x.clone()
    compute_stats(x)
    assert torch.equal(x, before)


# --------------------------------------------------------------------------- aggregate


def test_aggregate_two_images() -> None:
    a = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]]])  # channel 1 dead
    b = torch.tensor([[[10.0, 0.0, 0.0, 0.0], [-1.0, -1.0, 2.0, -1.0]]])  # channel 1 alive
    (sa,), (sb,) = compute_stats(a), compute_stats(b)
    pooled = aggregate([sa, sb])
    both = torch.cat([a.flatten(), b.flatten()]).double()
    assert pooled.count == 16
    assert pooled.mean == pytest.approx(float(both.mean()))
    assert pooled.std == pytest.approx(float(both.std(correction=0)))
    assert (pooled.min, pooled.max) == (-1.0, 10.0)
    assert pooled.zero_frac == pytest.approx(float((both == 0).double().mean()))
    assert pooled.neg_frac == pytest.approx(3 / 16)
    assert pooled.p99 == pytest.approx((sa.p99 + sb.p99) / 2)  # equal counts: plain mean
    # Channel 1 is dead in image a only; channel 0 in neither.
    assert pooled.dead_indices == ()
    assert aggregate([sa, sa]).dead_indices == (1,)


def test_aggregate_weights_by_finite_count_and_sums_nonfinite() -> None:
    (sa,) = compute_stats(torch.tensor([[1.0, NAN, NAN, NAN]]))
    (sb,) = compute_stats(torch.tensor([[3.0, 3.0, 3.0, INF]]))
    pooled = aggregate([sa, sb])
    assert (pooled.nan, pooled.inf, pooled.count) == (3, 1, 8)
    assert pooled.mean == pytest.approx((1 + 9) / 4)
    (sc,) = compute_stats(torch.tensor([[NAN, NAN]]))
    assert aggregate([sc, sc]).nan == 4 and math.isnan(aggregate([sc]).mean)


def test_aggregate_refuses_nothing_and_mismatched_channels() -> None:
    with pytest.raises(ValueError, match="at least one"):
        aggregate([])
    with pytest.raises(ValueError, match="channel"):
        aggregate([stats_of(channels=4), stats_of(channels=8)])


def test_aggregate_run_pools_each_layer_over_the_images_that_have_it() -> None:
    a, b = stats_of(mean=1.0, std=0.0), stats_of(mean=3.0, std=0.0)
    per_image = {
        "x": [("conv", a), ("head", stats_of(channels=4))],
        "y": [("conv", b), ("extra", a), ("head", stats_of(channels=8))],
    }
    run = aggregate_run(per_image)
    assert [name for name, _ in run] == ["conv", "extra"]  # head: channel counts differ
    assert run[0][1].mean == pytest.approx(2.0) and run[0][1].count == 200
    assert run[1][1] == aggregate([a])


# --------------------------------------------------------------------------- anomaly rules


def test_flag_kinds_are_listed() -> None:
    assert FLAG_KINDS == ("nan", "inf", "dead", "constant", "exploding", "vanishing")


def test_nan_in_a_middle_layer_is_the_first_bad_layer() -> None:
    layers = [
        ("conv1", stats_of()),
        ("conv2", stats_of(nan=5)),
        ("conv3", stats_of(nan=100, inf=3)),
    ]
    flags = flag_anomalies(layers)
    assert kinds(flags) == [("conv2", "nan"), ("conv3", "nan"), ("conv3", "inf")]
    assert "5 NaN values (5.00%)" in flags[0].message
    assert first_bad_layer(flags) == "conv2"
    assert first_bad_layer(flags, kinds={"inf"}) == "conv3"
    assert first_bad_layer(flag_anomalies(layers[:1])) is None


def test_dead_rule_and_its_threshold() -> None:
    layers = [("a", stats_of(dead=(0, 1))), ("b", stats_of(dead=(0,)))]
    flags = flag_anomalies(layers)
    assert kinds(flags) == [("a", "dead")]
    assert "2 of 4 channels" in flags[0].message
    assert kinds(flag_anomalies(layers, Thresholds(dead_frac=0.25))) == [
        ("a", "dead"),
        ("b", "dead"),
    ]


def test_vectors_are_never_dead() -> None:
    logits = stats_of(count=4, channels=4, dead=(0, 1, 2))  # one value per channel
    assert flag_anomalies([("fc", logits)]) == []


def test_constant_rule_but_not_for_an_all_dead_layer() -> None:
    layers = [
        ("sig", stats_of(mean=0.5, std=0.0, lo=0.5, hi=0.5)),
        ("relu", stats_of(mean=0.0, std=0.0, lo=0.0, hi=0.0, dead=(0, 1, 2, 3))),
    ]
    assert kinds(flag_anomalies(layers)) == [("sig", "constant"), ("relu", "dead")]


def test_exploding_and_vanishing_compare_with_the_previous_layer() -> None:
    layers = [
        ("a", stats_of(std=1.0)),
        ("b", stats_of(std=20.0)),  # 20x a
        ("c", stats_of(std=30.0)),  # 1.5x b: fine
        ("d", stats_of(std=2.0)),  # 1/15 of c
    ]
    flags = flag_anomalies(layers)
    assert kinds(flags) == [("b", "exploding"), ("d", "vanishing")]
    assert "that of a" in flags[0].message
    assert kinds(flag_anomalies(layers, Thresholds(explode_ratio=25, vanish_ratio=0.05))) == []


def test_rms_catches_a_shift_that_std_misses() -> None:
    layers = [("a", stats_of(mean=0.0, std=1.0)), ("b", stats_of(mean=50.0, std=1.0))]
    assert kinds(flag_anomalies(layers)) == [("b", "exploding")]


def test_zero_and_nan_magnitudes_are_skipped() -> None:
    zero = stats_of(mean=0.0, std=0.0, lo=0.0, hi=0.0, dead=(0, 1, 2, 3))
    nothing = LayerStats(16, NAN, NAN, NAN, NAN, NAN, NAN, 0.0, 0.0, 16, 0, 4, 4, 1.0)
    layers = [
        ("a", stats_of(std=1.0)),
        ("zero", zero),
        ("allnan", nothing),
        ("b", stats_of(std=2.0)),  # compared with a, not with the zero layer
    ]
    flags = flag_anomalies(layers)
    # The all-NaN layer is not called dead as well: it has nothing finite to judge.
    assert kinds(flags) == [("zero", "dead"), ("allnan", "nan")]


def test_find_flags_for_fail_on() -> None:
    per_image = {
        "a": [("l1", stats_of()), ("l2", stats_of(nan=1))],
        "b": [("l1", stats_of(dead=(0, 1, 2)))],
    }
    doc = to_json(per_image, aggregate_run(per_image))
    found = find_flags(doc, {"nan", "dead"})
    assert [(image, f.layer, f.kind) for image, f in found] == [
        ("a", "l2", "nan"),
        ("b", "l1", "dead"),
    ]
    assert find_flags(doc, parse_kinds("inf")) == []


def test_parse_kinds() -> None:
    assert parse_kinds("nan, inf") == {"nan", "inf"}
    assert parse_kinds("all") == set(FLAG_KINDS)
    assert parse_kinds("") == parse_kinds("none") == frozenset()
    with pytest.raises(UsageError, match="unknown anomaly kind 'nans'.*choose from nan, inf"):
        parse_kinds("nans,dead")


# --------------------------------------------------------------------------- CSV and JSON


def two_images() -> tuple[dict[str, list[tuple[str, LayerStats]]], list[tuple[str, LayerStats]]]:
    x = torch.zeros(2, 2, 3, 3)
    x[0, 0] = 1.0
    x[1, 0] = 3.0
    x[1, 1, 0, 0] = NAN
    conv = compute_stats(x)
    fc = compute_stats(torch.tensor([[0.5, -0.5], [1.5, 2.5]]))
    per_image = {
        "cat": [("conv", conv[0]), ("fc", fc[0])],
        "sub/dog": [("conv", conv[1]), ("fc", fc[1])],
    }
    run = [("conv", aggregate(conv)), ("fc", aggregate(fc))]
    return per_image, run


def test_rows_and_csv() -> None:
    per_image, run = two_images()
    rows = stats_rows(per_image, run)
    assert [(r["image"], r["layer"]) for r in rows] == [
        ("cat", "conv"),
        ("cat", "fc"),
        ("sub/dog", "conv"),
        ("sub/dog", "fc"),
        (RUN_KEY, "conv"),
        (RUN_KEY, "fc"),
    ]
    assert all(tuple(r) == CSV_FIELDS for r in rows)
    assert rows[0]["mean"] == 0.5 and rows[0]["dead_channels"] == 1
    assert rows[0]["flags"] == "dead"
    assert rows[2]["nan"] == 1 and rows[2]["flags"] == "nan;dead"
    assert rows[4]["nan"] == 1 and rows[4]["count"] == 36

    text = to_csv(rows)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0] == ",".join(CSV_FIELDS)
    assert len(parsed) == 6
    assert parsed[2]["image"] == "sub/dog" and float(parsed[2]["mean"]) == pytest.approx(27 / 17)
    assert stats_rows(per_image, None)[-1]["image"] == "sub/dog"


def test_csv_writes_nan_as_empty() -> None:
    rows = stats_rows({"x": [("l", compute_stats(torch.full((1, 2), NAN))[0])]})
    (row,) = csv.DictReader(io.StringIO(to_csv(rows)))
    assert [row[k] for k in ("mean", "std", "min", "max", "p01", "p99")] == [""] * 6
    assert (row["count"], row["nan"], row["flags"]) == ("2", "2", "nan")


def test_json_shape_is_strict_json() -> None:
    per_image, run = two_images()
    doc = to_json(per_image, run)
    text = json.dumps(doc, allow_nan=False)  # raises on a stray NaN
    back = json.loads(text)
    assert back["format"] == 1
    assert back["flag_kinds"] == list(FLAG_KINDS)
    assert back["thresholds"]["dead_frac"] == 0.5
    assert list(back["images"]) == ["cat", "sub/dog"]
    dog = back["images"]["sub/dog"]
    assert [layer["name"] for layer in dog["layers"]] == ["conv", "fc"]
    assert dog["layers"][0]["nan"] == 1
    assert dog["layers"][0]["dead_indices"] == [1]
    assert {"layer": "conv", "kind": "nan", "message": "1 NaN values (5.56%)"} in dog["flags"]
    assert dog["first_nonfinite"] == "conv"
    assert back["images"]["cat"]["first_nonfinite"] is None
    assert back["run"]["layers"][0]["count"] == 36
    assert to_json(per_image)["run"] is None


def test_to_dict_round_trip() -> None:
    (s,) = compute_stats(torch.tensor([[1.0, NAN, -2.0, 0.0]]))
    data = s.to_dict()
    assert data["nan"] == 1 and data["dead_indices"] == [1, 2, 3]
    back = LayerStats.from_dict(json.loads(json.dumps(data)))
    assert back.mean == pytest.approx(s.mean, rel=1e-6)  # 7 significant digits are kept
    assert back.std == pytest.approx(s.std, rel=1e-6)
    assert (back.count, back.nan, back.dead_indices) == (s.count, s.nan, s.dead_indices)
    (empty,) = compute_stats(torch.full((1, 2), NAN))
    assert empty.to_dict()["mean"] is None
    assert math.isnan(LayerStats.from_dict(empty.to_dict()).mean)
