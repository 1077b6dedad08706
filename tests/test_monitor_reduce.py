"""The training monitor's reductions: the norms and counts against float64 and torch's own,
and the update ratio's sample of a large parameter."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from actviz.monitor.params import SAMPLE_RUN, UPDATE_SAMPLE, _sample
from actviz.monitor.reduce import (
    FlagBuffer,
    block_plan,
    fusable,
    nonzero_count,
    root,
    squared_norm,
    squared_norm_block,
)
from actviz.monitor.scalars import ScalarBatch

#: One buffer for every count below: grown by a large tensor, then reused by smaller ones
#: whose flags must not include what a larger one left past their end.
FLAGS = FlagBuffer()


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x,  # contiguous float32: a dot product
        lambda x: x.t(),  # not contiguous
        lambda x: x[500:].t(),  # not contiguous, not at the start of its storage
        lambda x: x[:1].expand(300, -1),  # the same values over and over
        lambda x: x.half(),  # accumulated in float32
        lambda x: x.view(10, 10, 100, 10).contiguous(memory_format=torch.channels_last),
    ],
)
def test_squared_norms_equal_float64_alone_and_in_a_block(make: object) -> None:
    g = torch.Generator().manual_seed(0)
    x = make(torch.randn(1000, 100, generator=g) * 3)  # type: ignore[operator]
    exact = float((x.double() ** 2).sum())
    assert float(squared_norm(x)) == pytest.approx(exact, rel=1e-4)
    block, at = squared_norm_block([x, torch.zeros(0), x[:1]])
    assert float(block[at[0]]) == pytest.approx(exact, rel=1e-4)
    assert float(block[at[1]]) == 0.0
    assert root(float(block[at[0]])) == pytest.approx(math.sqrt(exact), rel=1e-4)


def test_small_cpu_tensors_reduced_together_equal_float64_each() -> None:
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(512, 256, 9, generator=g)
    small = [
        torch.randn(64, generator=g),  # a batch-norm's weight
        _sample(weight),  # the update ratio's strided sample of a large weight
        torch.randn(10, 512, generator=g).t(),  # not contiguous
        torch.tensor([1.0, math.nan]),
        torch.tensor([math.inf, 2.0]),
        torch.zeros(0),
    ]
    assert all(fusable(t) for t in small) and not fusable(weight)
    assert not fusable(torch.randn(8).double()) and not fusable(torch.randn(8).half())
    block, at = squared_norm_block([*small, weight])
    norms = [float(block[i]) for i in at]
    for tensor, norm in zip([*small[:3], weight], [*norms[:3], norms[-1]], strict=True):
        assert norm == pytest.approx(float((tensor.double() ** 2).sum()), rel=1e-5)
    assert math.isnan(norms[3]) and norms[4] == math.inf and norms[5] == 0.0


def test_nonfinite_values_stay_nonfinite_and_zeros_are_counted() -> None:
    x = torch.tensor([0.0, -0.0, 1.0, math.nan, -2.0, math.inf])
    assert math.isnan(root(float(squared_norm(x))))
    assert root(float(squared_norm(torch.tensor([math.inf, 1.0])))) == math.inf
    assert int(nonzero_count(x)) == int(torch.count_nonzero(x)) == 4
    relu = torch.randn(64, 64, generator=torch.Generator().manual_seed(1)).relu()
    assert int(nonzero_count(relu)) == int(torch.count_nonzero(relu))


@pytest.mark.parametrize("n", [1, 1015, 1016, 1017, 2032, 100_003, 1_605_632])
def test_nonzero_count_equals_torch_at_every_size_around_its_blocks(n: int) -> None:
    # Blocks of 127 x 8 flags are counted as words; the rest one by one: sizes either side of
    # a block, with up to every flag set in a block (a byte's count reaching 127).
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    x[torch.rand(n, generator=g) < 0.3] = 0.0
    x[: min(n, 1016)] = 1.0
    x[n // 2] = math.nan  # not zero
    assert int(nonzero_count(x)) == int(torch.count_nonzero(x))
    assert int(nonzero_count(x, FLAGS)) == int(torch.count_nonzero(x))
    assert int(nonzero_count(torch.ones(n), FLAGS)) == n
    assert int(nonzero_count(torch.zeros(n), FLAGS)) == 0
    assert int(nonzero_count(torch.zeros(n))) == 0
    assert int(nonzero_count(torch.ones(n))) == n


def test_nonzero_count_of_laid_out_and_narrow_tensors() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 64, 14, 14, generator=g).relu()
    for view in (
        x.contiguous(memory_format=torch.channels_last),
        x.transpose(1, 3),
        x[1:5].transpose(1, 3),  # read from its own place in the storage
        x[:1].expand(3, -1, -1, -1),  # a value counted as often as it is seen
        x[:, ::3],
        x.half(),
        x.double(),
    ):
        assert int(nonzero_count(view)) == int(torch.count_nonzero(view))
        assert int(nonzero_count(view, FLAGS)) == int(torch.count_nonzero(view))
    assert int(nonzero_count(torch.zeros(0))) == int(nonzero_count(torch.zeros(0), FLAGS)) == 0
    signed = torch.tensor([0.0, -0.0, math.nan, -math.inf, 1e-45])  # 1e-45: the least float32
    assert int(nonzero_count(signed, FLAGS)) == 3
    assert int(nonzero_count(torch.ones(5000), FLAGS)) == 5000
    assert int(nonzero_count(torch.zeros(1017), FLAGS)) == 0  # none of the ones left behind


def test_a_tensor_past_what_the_flag_buffer_keeps_is_counted_without_growing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import actviz.monitor.reduce as reduce

    monkeypatch.setattr(reduce, "FLAGS_KEPT", 1000)
    flags = FlagBuffer()
    x = torch.ones(1001)
    x[::2] = 0.0
    assert int(nonzero_count(x, flags)) == 500
    assert flags._buffer.numel() == 0  # counted from its own cast
    assert int(nonzero_count(x[:1000], flags)) == 500
    assert flags._buffer.numel() == 1016  # 1,000 flags and the pad to a whole lane


def test_counts_through_kept_views_follow_each_shape_in_any_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each shape's views are kept: a shape seen again after a longer tensor (whose flags lie
    # past its end, where its words read) or after the buffer grew (a new buffer) counts only
    # its own values; so does one whose views were dropped for the cap.
    import actviz.monitor.reduce as reduce

    monkeypatch.setattr(reduce, "_PLANS_KEPT", 2)
    flags = FlagBuffer()
    g = torch.Generator().manual_seed(5)
    shapes = [(2, 3, 7, 7), (1017,), (4, 1016), (3000,), (2, 3, 7, 7), (1017,), (9000,)]
    for _ in range(3):
        for shape in shapes:
            x = torch.randn(shape, generator=g).relu()
            assert int(nonzero_count(x, flags)) == int(torch.count_nonzero(x))
            assert int(nonzero_count(torch.zeros(shape), flags)) == 0
            assert int(nonzero_count(torch.ones(shape), flags)) == x.numel()
            assert int(nonzero_count(x.transpose(0, -1), flags)) == int(torch.count_nonzero(x))
    assert len(flags._plans) <= 2


def test_a_block_of_squared_norms_holds_each_tensors_at_its_place() -> None:
    g = torch.Generator().manual_seed(4)
    tensors = [
        torch.randn(300_000, generator=g),  # large: a dot product of its own
        torch.randn(64, generator=g),  # small: in the fused call
        torch.randn(10, 512, generator=g).t(),  # small, not contiguous
        torch.randn(100, generator=g).double(),  # float64: reduced alone, read as float32
        torch.randn(100, generator=g).half(),
        torch.zeros(0),
        torch.tensor([1.0, math.nan]),
    ]
    block, places = squared_norm_block(tensors)
    assert block.dtype == torch.float32 and block.shape == (len(tensors),)
    assert sorted(places) == list(range(len(tensors)))
    for tensor, place in zip(tensors[:5], places, strict=False):
        exact = float((tensor.double() ** 2).sum())
        assert float(block[place]) == pytest.approx(exact, rel=1e-4)
    assert float(block[places[5]]) == 0.0 and math.isnan(float(block[places[6]]))
    # A plan kept for such a list: the same values at its places, the tensors reduced one by
    # one taken from the last.
    plan = block_plan(tensors, rest_last_first=True)
    assert plan.rest == sorted(plan.rest, reverse=True) and len(plan.rest) >= 2
    again, at = squared_norm_block(tensors, plan)
    for i in range(len(tensors)):
        assert float(again[at[i]]) == pytest.approx(float(block[places[i]]), rel=1e-6, nan_ok=True)
    empty, none = squared_norm_block([])
    assert empty.shape == (0,) and none == []


def test_scalars_read_back_in_the_order_queued_whatever_their_form() -> None:
    batch = ScalarBatch()
    first = batch.add(torch.tensor(1.5))
    block = batch.add_block(torch.tensor([2.0, 3.0, 4.0]))
    count = batch.add_count(torch.tensor(2**40 + 1))  # past float32's exact integers
    between = batch.add(torch.tensor(5.0, dtype=torch.float16))
    nothing = batch.add_block(torch.zeros(0))
    last = batch.add(torch.tensor(-6.0, dtype=torch.float64))
    counts = batch.add_counts(torch.tensor([7, 8]))
    after = batch.add_count(torch.tensor(9))
    also = batch.add_count(torch.tensor(10))
    assert len(batch) == 11
    floats, ints = batch.read()
    assert floats[first] == 1.5 and floats[block : block + 3] == [2.0, 3.0, 4.0]
    assert floats[between] == 5.0 and floats[last] == -6.0 and nothing == last
    assert ints[count] == 2**40 + 1 and ints[counts] == [7, 8]
    assert (ints[after], ints[also]) == (9, 10) and len(ints) == 5
    assert batch.read() == ([], [])  # emptied


def test_a_large_parameter_is_sampled_in_runs_spread_over_it() -> None:
    weight = torch.arange(512 * 256 * 9, dtype=torch.float32)  # 1,179,648 values
    sample = _sample(weight)
    runs, width = sample.shape
    assert width == SAMPLE_RUN and runs * width <= UPDATE_SAMPLE
    starts = sample[:, 0].long()
    stride = int(starts[1] - starts[0]) // SAMPLE_RUN
    assert all(stride % d for d in range(2, stride))  # prime
    assert (sample - sample[:, :1] == torch.arange(SAMPLE_RUN)).all()  # consecutive values
    assert int(starts[0]) == 0 and int(starts[-1]) > weight.numel() - stride * SAMPLE_RUN - 1
    assert sample.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()  # a view
    small = torch.ones(UPDATE_SAMPLE)
    assert _sample(small).shape == (UPDATE_SAMPLE,)


def test_sparse_and_float64_tensors_are_reduced_too() -> None:
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    embedding(torch.tensor([1, 2, 2])).sum().backward()
    grad = embedding.weight.grad
    assert grad is not None and grad.is_sparse
    dense = float((grad.to_dense().double() ** 2).sum())
    assert float(squared_norm(grad)) == pytest.approx(dense, rel=1e-6)
    wide = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert float(squared_norm(wide)) == pytest.approx(float((wide**2).sum()), rel=1e-6)


def test_a_watched_model_with_a_sparse_embedding_trains(tmp_path: Path) -> None:
    import actviz
    from actviz.monitor import read_log

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(20, 8, sparse=True), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0.0
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        for step in range(2):
            tokens = torch.tensor([[step, 3, 5], [7, 3, 11]])
            loss = model(tokens).mean(dim=1).logsumexp(dim=1).mean()
            loss.backward()
            grad = model[0].weight.grad
            assert grad is not None
            seen = float(grad.to_dense().norm())
            optimizer.step()
            optimizer.zero_grad()
            w.step(loss=loss)
    record = read_log(tmp_path).steps[-1]
    assert record["params"]["0.weight"]["grad_norm"] == pytest.approx(seen, rel=1e-5)
