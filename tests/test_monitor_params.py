"""The parameters' numbers of the training monitor where they are taken once and reused: the
norm after clipping of a gradient nothing changed, and the update ratio's sampled views kept
from step to step."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import actviz
from actviz.monitor import read_log
from actviz.monitor.params import SAMPLE_RUN, UPDATE_SAMPLE, _sample
from actviz.monitor.reduce import FUSE_BELOW
from tests.test_monitor import batch, make_model


def train_with(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    w: actviz.monitor.Watch,
    steps: int,
    between: Callable[[int], None],
) -> None:
    for step in range(steps):
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        between(step)
        optimizer.step()
        optimizer.zero_grad()
        w.step(loss=loss)


@pytest.mark.parametrize(
    ("change", "factor"),
    [
        ("none", 1.0),
        ("in place", 0.5),  # the same tensor, a new version
        ("replaced", 0.25),  # another tensor
    ],
)
def test_the_norm_after_clipping_follows_what_the_loop_did_to_the_gradient(
    tmp_path: Path, change: str, factor: float
) -> None:
    # A large parameter (its norm taken in its own hook, on a CPU) among small ones (taken
    # together when the backward ends).
    model = nn.Sequential(*make_model(), nn.Linear(3, 300), nn.Linear(300, 300), nn.Linear(300, 3))
    sizes = [p.numel() for p in model.parameters()]
    assert max(sizes) >= FUSE_BELOW > min(sizes)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: dict[str, float] = {}

    def between(step: int) -> None:
        for name, p in model.named_parameters():
            assert p.grad is not None
            seen[name] = float(p.grad.norm())
            if change == "in place":
                p.grad.mul_(factor)
            elif change == "replaced":
                p.grad = p.grad * factor

    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        train_with(model, optimizer, w, 2, between)
    record = read_log(tmp_path).steps[-1]
    assert record["grad_norm_clipped"] is not None
    for name, numbers in record["params"].items():
        assert numbers["grad_norm"] == pytest.approx(seen[name], rel=1e-5)
        assert numbers["grad_norm_clipped"] == pytest.approx(seen[name] * factor, rel=1e-5)
    if change == "none":
        # Nothing changed the gradients: the norm is the one taken before, not another pass.
        assert all(p["grad_norm_clipped"] == p["grad_norm"] for p in record["params"].values())


def test_update_ratios_stay_right_over_steps_and_a_swapped_storage(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(108, 200), nn.ReLU(), nn.Linear(200, 3))
    assert model[1].weight.numel() > UPDATE_SAMPLE  # sampled in runs, with a stride
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    before: list[torch.Tensor] = []
    # The ratio over every other run of 64 values (21,600 values make 337 whole runs, and 2
    # is the smallest prime stride that brings them under the sample's 256 runs), the weight
    # norm.
    full: list[tuple[float, float]] = []

    def remember(step: int) -> None:
        weight = model[1].weight
        if step == 2:
            # New storage for the parameter: what was kept of the old one must not be used.
            weight.data = weight.data.clone()
        before[:] = [weight.detach().clone()]

    def ratio_after(*_: object) -> None:
        weight = model[1].weight.detach()
        runs = weight.numel() // SAMPLE_RUN
        new, old = (
            w.reshape(-1)[: runs * SAMPLE_RUN].view(runs, SAMPLE_RUN)[::2]
            for w in (weight, before[0])
        )
        full.append((float((new - old).norm() / old.norm()), float(weight.norm())))

    optimizer.register_step_post_hook(ratio_after)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        train_with(model, optimizer, w, 4, remember)
    steps = read_log(tmp_path).steps
    assert len(steps) == len(full) == 4
    for record, (ratio, norm) in zip(steps, full, strict=True):
        numbers = record["params"]["1.weight"]
        assert ratio > 0
        # A view of a storage the optimizer no longer updates would give 0.
        assert numbers["update_ratio"] == pytest.approx(ratio, rel=1e-4)
        assert numbers["weight_norm"] == pytest.approx(norm, rel=1e-5)


def test_gradients_accumulated_over_two_backwards_are_measured_after_the_second(
    tmp_path: Path,
) -> None:
    """The norms before clipping are taken as each gradient is accumulated (a large one on a
    CPU) or together when a backward ends (the others): with two backward passes in a step,
    the record holds the norms of the summed gradients, and clipping after the second does
    not reach them."""
    model = make_model().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: dict[str, float] = {}
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        for step in range(2):
            for half in (0, 1):
                x, y = batch(2 * step + half)
                nn.functional.cross_entropy(model(x), y).backward()
            seen = {n: float(p.grad.norm()) for n, p in model.named_parameters()}
            total = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3))
            optimizer.step()
            optimizer.zero_grad()
            w.step()
    record = read_log(tmp_path).steps[-1]
    assert record["grad_norm"] == pytest.approx(total, rel=1e-5)
    for name, norm in seen.items():
        assert record["params"][name]["grad_norm"] == pytest.approx(norm, rel=1e-5)
        clipped = record["params"][name]["grad_norm_clipped"]
        assert clipped == pytest.approx(norm * 1e-3 / total, rel=1e-4)


def test_zero_grad_frees_the_gradients_the_watch_measured(tmp_path: Path) -> None:
    # The watch keeps a gradient only until the optimizer's pre-hook has compared it: the
    # loop's zero_grad frees it, as without the watch, not the end of the step.
    model = make_model().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        for step in range(2):
            x, y = batch(step)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            grads = [weakref.ref(p.grad) for p in model.parameters() if p.grad is not None]
            optimizer.step()
            optimizer.zero_grad()
            assert len(grads) == 8
            assert [g() for g in grads] == [None] * len(grads)
            w.step(loss=loss)
    assert len(read_log(tmp_path).steps) == 2


class _Mixed(nn.Module):
    """Parameters the update samples keep apart: a float64 one (another buffer), one that
    is not contiguous (its sample a copy, taken anew each time), a large one (sampled in
    runs) and small float32 ones of sizes that do not fill a row of the buffer."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.big = nn.Parameter(torch.randn(200, 108, generator=g) * 0.1)
        self.bias = nn.Parameter(torch.randn(200, generator=g) * 0.1)
        self.wide = nn.Parameter(torch.randn(3, 200, generator=g).t() * 0.1)  # not contiguous
        self.scale = nn.Parameter(torch.ones(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x.flatten(1) @ self.big.t() + self.bias)
        return (h @ self.wide) * self.scale.float()


def test_update_ratios_and_weight_norms_of_parameters_of_every_kind(tmp_path: Path) -> None:
    model = _Mixed()
    assert not model.wide.is_contiguous() and model.big.numel() > UPDATE_SAMPLE
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    before: dict[str, torch.Tensor] = {}
    expected: list[dict[str, tuple[float, float]]] = []

    def remember(step: int) -> None:
        before.update({n: p.detach().clone() for n, p in model.named_parameters()})

    def measure(*_: object) -> None:
        numbers = {}
        for name, param in model.named_parameters():
            new, old = (_sample(t).double() for t in (param.detach(), before[name]))
            ratio = float((new - old).norm() / old.norm())
            numbers[name] = (ratio, float(param.detach().double().norm()))
        expected.append(numbers)

    optimizer.register_step_post_hook(measure)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        train_with(model, optimizer, w, 3, remember)
    steps = read_log(tmp_path).steps
    assert len(steps) == len(expected) == 3
    for record, numbers in zip(steps, expected, strict=True):
        assert set(record["params"]) == set(numbers)
        for name, (ratio, norm) in numbers.items():
            got = record["params"][name]
            assert ratio > 0
            assert got["update_ratio"] == pytest.approx(ratio, rel=1e-4), name
            assert got["weight_norm"] == pytest.approx(norm, rel=1e-5), name
