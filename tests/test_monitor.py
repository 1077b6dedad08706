"""The training monitor on a tiny model trained a few steps on random data: the statistics,
the clip norms, the hooks' cleanup, the log after a crash, and the origin of the first NaN."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import actviz
from actviz.errors import NonFiniteError
from actviz.monitor import read_log


class Divide(nn.Module):
    """Divides by a number the test can set to zero: 0/0 gives NaN, x/0 gives +-Inf."""

    def __init__(self) -> None:
        super().__init__()
        self.by = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.by


class SqrtAct(nn.Module):
    """x + sqrt(0 * x): the forward gives x back, the backward inf * 0 = NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sqrt(x * 0.0)


class Fork(nn.Module):
    """A ReLU and a SqrtAct on the same input, added."""

    def __init__(self) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.make = SqrtAct()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x) + self.make(x)


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        Divide(),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 3),
    )


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 3, (4,), generator=g)


def hook_count(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    count = sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )
    count += sum(
        len(getattr(p, "_post_accumulate_grad_hooks", None) or {}) for p in model.parameters()
    )
    if optimizer is not None:
        count += len(optimizer._optimizer_step_pre_hooks) + len(
            optimizer._optimizer_step_post_hooks
        )
    return count


def train(model, optimizer, w, steps, *, clip=None, on_step=None):  # type: ignore[no-untyped-def]
    norms = []
    for step in range(steps):
        if on_step is not None:
            on_step(step)
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        w.step(loss=loss)
    return norms


def test_lazy_export() -> None:
    from actviz.monitor import watch

    assert actviz.watch is watch


def test_statistics_and_clip_norms(tmp_path: Path) -> None:
    model = make_model().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: dict[str, torch.Tensor] = {}
    model[4].register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach().clone()))
    with actviz.watch(model, optimizer, layers="conv,linear", every=2, out=tmp_path) as w:
        norms = train(model, optimizer, w, 5, clip=0.5)
    log = read_log(tmp_path)
    assert [r["step"] for r in log.steps] == [0, 2, 4]
    assert log.start["layers"] == ["0", "4", "6"]
    assert log.end is not None and log.end["steps"] == 5
    last = log.steps[-1]
    # The layer statistics are those of the output the model produced at that step.
    out = seen["out"]
    row = last["layers"]["4"]
    assert row["shape"] == [4, 4, 6, 6]
    assert row["mean"] == pytest.approx(out.mean().item(), abs=1e-5)
    assert row["std"] == pytest.approx(out.std(correction=0).item(), rel=1e-3)
    assert row["min"] == pytest.approx(out.min().item())
    assert row["max"] == pytest.approx(out.max().item())
    assert row["zero_frac"] == pytest.approx((out == 0).float().mean().item())
    assert row["nan"] == row["inf"] == 0
    assert row["grad_norm"] > 0
    # Before clipping: clip_grad_norm_'s own total; after: the clipped total (0.5).
    for record, total in ((log.steps[0], norms[0]), (log.steps[1], norms[2]), (last, norms[4])):
        assert record["grad_norm"] == pytest.approx(total, rel=1e-5)
        assert total > 0.5
        assert record["grad_norm_clipped"] == pytest.approx(0.5, rel=1e-4)
        per_param = record["params"]
        assert list(per_param) == [n for n, _ in model.named_parameters()]
        pre = math.sqrt(sum(p["grad_norm"] ** 2 for p in per_param.values()))
        assert pre == pytest.approx(total, rel=1e-5)
        for p in per_param.values():
            assert p["grad_norm_clipped"] == pytest.approx(p["grad_norm"] * 0.5 / total, rel=1e-4)
    weight = last["params"]["6.weight"]
    assert weight["weight_norm"] == pytest.approx(model[6].weight.norm().item(), rel=1e-5)
    # SGD: the update is lr times the clipped gradient.
    expected = 0.05 * weight["grad_norm_clipped"]
    assert weight["update_ratio"] * weight["weight_norm"] == pytest.approx(expected, rel=0.05)
    assert last["loss"] > 0


def test_a_selected_relu_and_conv_record_their_own_outputs_and_gradients(tmp_path: Path) -> None:
    # The ReLU's non-finite check shares its input's sum, and a selected output's gradient
    # hook is the non-finite watch's: neither may leak into the statistics.
    model = make_model().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        def hook(m: nn.Module, a: Any, o: torch.Tensor) -> None:
            seen[name] = o.detach().clone()
            o.register_hook(lambda g: seen.__setitem__(name + " grad", g.detach().clone()))

        return hook

    model[2].register_forward_hook(keep("2"))  # ReLU(inplace=True)
    model[4].register_forward_hook(keep("4"))
    with actviz.watch(model, optimizer, layers="2,4", every=1, out=tmp_path) as w:
        train(model, optimizer, w, 2)
    layers = read_log(tmp_path).steps[-1]["layers"]
    for name in ("2", "4"):
        out, row = seen[name], layers[name]
        assert row["mean"] == pytest.approx(out.mean().item(), rel=1e-4, abs=1e-6)
        assert row["std"] == pytest.approx(out.std(correction=0).item(), rel=1e-3)
        assert row["zero_frac"] == pytest.approx((out == 0).float().mean().item())
        assert row["grad_norm"] == pytest.approx(seen[name + " grad"].norm().item(), rel=1e-4)
    # The batch-norm's output the ReLU overwrote has mean 0; the ReLU's is well above.
    assert layers["2"]["min"] == 0.0 and layers["2"]["mean"] > 0.2


def test_a_nan_through_relu_and_max_pool_is_named_where_it_was_made(tmp_path: Path) -> None:
    torch.manual_seed(0)
    divide = Divide()
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        divide,
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 3),
    )
    for by, expected in ((1.0, []), (0.0, [("forward", "1", "Divide")])):
        divide.by = by
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with actviz.watch(model, out=tmp_path / str(by), every=1) as w:
                x, y = batch(0)
                nn.functional.cross_entropy(model(x), y).backward()
                w.step()
        assert [(o.phase, o.module, o.module_type) for o in w.origins] == expected


def test_a_huge_finite_gradient_is_not_called_inf(tmp_path: Path) -> None:
    # Squares of gradients around 1e23 overflow float32: the selected outputs' sums of
    # squares are infinite, the gradients are not, and nothing is named.
    model = make_model()
    with actviz.watch(model, out=tmp_path, layers="conv,linear", every=1) as w:
        x, y = batch(0)
        (nn.functional.cross_entropy(model(x), y) * 1e25).backward()
        w.step()
    assert w.origins == []
    log = read_log(tmp_path)
    assert log.first_nonfinite is None and "nonfinite" not in log.steps[0]
    assert log.steps[0]["layers"]["6"]["grad_norm"] is None  # its square overflowed


def test_no_optimizer_leaves_out_clip_and_updates(tmp_path: Path) -> None:
    model = make_model()
    with actviz.watch(model, every=1, out=tmp_path) as w:
        train(model, None, w, 2)
        model.zero_grad()
    record = read_log(tmp_path).steps[0]
    assert record["grad_norm_clipped"] is None
    assert set(record["params"]["0.weight"]) == {"grad_norm", "weight_norm"}


def test_steps_without_w_step_end_at_the_optimizer_step(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        for step in range(3):
            x, y = batch(step)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert w.steps == 3
    assert [r["step"] for r in read_log(tmp_path).steps] == [0, 1, 2]


def test_hooks_gone_and_modes_kept_after_success_and_exception(tmp_path: Path) -> None:
    model = make_model().train()
    model[1].eval()  # a mixed state must come back as it was
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    before = hook_count(model, optimizer)
    modes = [m.training for m in model.modules()]
    with actviz.watch(model, optimizer, every=1, out=tmp_path / "a") as w:
        assert hook_count(model, optimizer) > before
        train(model, optimizer, w, 2)
    assert hook_count(model, optimizer) == before
    assert [m.training for m in model.modules()] == modes
    with (
        pytest.raises(RuntimeError, match="boom"),
        actviz.watch(model, optimizer, every=1, out=tmp_path / "b") as w,
    ):
        train(model, optimizer, w, 1)
        x, _ = batch(9)
        model(x)  # a forward whose backward never comes
        raise RuntimeError("boom")
    assert hook_count(model, optimizer) == before
    assert [m.training for m in model.modules()] == modes
    log = read_log(tmp_path / "b")
    assert log.end is not None and "boom" in log.end["error"]
    # Autograd untouched: the gradients are those of an unwatched run.
    plain = make_model()
    x, y = batch(0)
    nn.functional.cross_entropy(plain(x), y).backward()
    watched = make_model()
    with actviz.watch(watched, every=1, out=tmp_path / "c"):
        nn.functional.cross_entropy(watched(x), y).backward()
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_nan_origin_named_at_its_step(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def inject(step: int) -> None:
        if step == 3:
            model[3].by = 0.0

    with (
        pytest.warns(RuntimeWarning, match=r"step 3: 3 \(Divide\) produced the first"),
        actviz.watch(model, optimizer, every=2, out=tmp_path) as w,
    ):
        train(model, optimizer, w, 5, on_step=inject)
    first = w.origins[0]
    assert (first.module, first.module_type, first.phase) == ("3", "Divide", "forward")
    assert first.value in ("NaN", "Inf")
    log = read_log(tmp_path)
    event = log.first_nonfinite
    assert event is not None
    assert (event["step"], event["module"], event["phase"]) == (3, "3", "forward")
    # Modules after it only passed it on: never named at that step.
    assert [o.module for o in w.origins[:1]] == ["3"]
    assert all(o.module != "4" and o.module != "6" for o in w.origins)
    # Its inputs are saved, finite (the division made the NaN), and reproduce it.
    saved = torch.load(tmp_path / event["inputs_file"], weights_only=True)
    (x,) = saved["args"]
    assert torch.isfinite(x).all()
    assert not torch.isfinite(x / 0.0).all()
    # Step records before the injection are clean.
    assert "nonfinite" not in log.steps[1]


def test_raise_stops_the_loop_naming_the_module(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model[3].by = 0.0
    with (
        pytest.raises(NonFiniteError, match=r"step 0: 3 \(Divide\) produced the first") as caught,
        actviz.watch(model, optimizer, out=tmp_path, on_nonfinite="raise") as w,
    ):
        train(model, optimizer, w, 3)
    assert (caught.value.module, caught.value.phase, caught.value.step) == ("3", "forward", 0)
    assert hook_count(model, optimizer) == 0


def test_backward_origin(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), SqrtAct(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    with pytest.warns(RuntimeWarning), actviz.watch(model, out=tmp_path, every=0) as w:
        x = torch.randn(16, 5)
        model(x).sum().backward()
        w.step()
    assert len(w.origins) == 1
    origin = w.origins[0]
    assert (origin.phase, origin.module, origin.module_type) == ("backward", "1", "SqrtAct")
    assert read_log(tmp_path).steps == []  # every=0: no statistics, the watch only


@pytest.mark.parametrize(
    ("layers", "origin"),
    [
        # The NaN gradient reaches a ReLU whose input gradient is no longer reduced.
        (lambda: [nn.BatchNorm1d(8), nn.ReLU(inplace=True), SqrtAct(), nn.ReLU()], "3"),
        # It is made right behind a ReLU, into the gradient of that ReLU's input.
        (lambda: [SqrtAct(), nn.ReLU(inplace=True), nn.Linear(8, 8), nn.ReLU()], "1"),
        (lambda: [nn.ReLU(), SqrtAct(), nn.Flatten(), nn.Identity()], "2"),
        # A ReLU and the maker both take the same input: the ReLU is not named.
        (lambda: [Fork()], "1.make"),
    ],
)
@pytest.mark.parametrize("every", [0, 1])  # without and with the linear layers' statistics
def test_a_backward_nan_beside_relus_is_named_where_it_was_made(
    tmp_path: Path, layers: Callable[[], list[nn.Module]], origin: str, every: int
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), *layers(), nn.Linear(8, 1))
    with pytest.warns(RuntimeWarning), actviz.watch(model, out=tmp_path, every=every) as w:
        model(torch.randn(16, 5)).sum().backward()
        w.step()
    assert [(o.phase, o.module, o.module_type) for o in w.origins] == [
        ("backward", origin, "SqrtAct")
    ]


def test_a_models_output_a_relu_also_took_keeps_its_gradient_watched(tmp_path: Path) -> None:
    class Returns(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(5, 8)
            self.relu = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            self.relu(h)  # a look at it, and the output is h itself
            return h

    model = Returns()
    with pytest.warns(RuntimeWarning), actviz.watch(model, out=tmp_path, every=0) as w:
        torch.sqrt(model(torch.randn(16, 5)) * 0.0).sum().backward()  # a NaN gradient
        w.step()
    assert [(o.phase, o.module) for o in w.origins] == [("backward", "(loss)")]


@pytest.mark.parametrize(("act", "watched"), [(nn.ReLU, 4), (nn.Tanh, 6)])
def test_a_relus_input_gradient_is_not_reduced(
    tmp_path: Path, act: type[nn.Module], watched: int
) -> None:
    # Its input gradient is its output gradient masked: finite when that one was.
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(5, 8), nn.BatchNorm1d(8), act(), nn.Linear(8, 8), act(), nn.Linear(8, 1)
    )
    with actviz.watch(model, out=tmp_path, every=0) as w:
        model(torch.randn(16, 5)).sum().backward()
        assert w._tracker is not None
        assert len(w._tracker._grad_order) == watched
        w.step()
    assert w.origins == []


def test_allow_inf_masks(tmp_path: Path) -> None:
    class Mask(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.masked_fill(torch.arange(x.shape[-1]) % 2 == 0, float("-inf"))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), Mask(), nn.Softmax(-1), nn.Linear(6, 2))
    for allow, expected in ((None, ["1"]), ("1", [])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with actviz.watch(model, out=tmp_path / str(allow), allow_inf=allow) as w:
                model(torch.randn(3, 4)).sum().backward()
                w.step()
        assert len(caught) == len(expected)
        assert [o.module for o in w.origins] == expected


def test_a_relu_after_an_allowed_minus_inf_is_not_named(tmp_path: Path) -> None:
    # The ReLU shares its input's sum: -inf allowed there turns into 0, and stays allowed.
    class Mask(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.masked_fill(torch.arange(x.shape[-1]) % 2 == 0, float("-inf"))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), Mask(), nn.ReLU(), nn.Linear(6, 2))
    with actviz.watch(model, out=tmp_path, allow_inf="1", every=1) as w:
        model(torch.randn(3, 4)).sum().backward()
        w.step()
    assert w.origins == []
    assert read_log(tmp_path).steps[0]["layers"]["3"]["mean"] is not None


def test_integer_inputs_skipped(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2))
    with actviz.watch(model, out=tmp_path, every=1) as w:
        model(torch.randint(0, 10, (2, 3))).sum().backward()
        w.step()
    assert w.origins == []
    assert set(read_log(tmp_path).steps[0]["layers"]) == {"0", "2"}


def test_log_survives_kill(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import torch, actviz
        from torch import nn
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with actviz.watch(model, opt, every=1, out={str(tmp_path)!r}) as w:
            while True:
                loss = model(torch.randn(4, 8)).pow(2).mean()
                loss.backward(); opt.step(); opt.zero_grad(); w.step(loss=loss)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    log_file = tmp_path / "watch.jsonl"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log_file.exists() and log_file.read_bytes().count(b"\n") >= 6:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # A crash in the middle of a write leaves a torn line: the reader skips it.
    with open(log_file, "ab") as f:
        f.write(b'{"kind":"step","step":99999,"lay')
    log = read_log(tmp_path)
    assert log.end is None  # the run never ended
    assert log.torn == 1
    steps = [r["step"] for r in log.steps]
    assert len(steps) >= 5 and steps == list(range(len(steps)))
    assert all(r["loss"] > 0 for r in log.steps)
    # A new run appends after the torn line, on a line of its own.
    model = nn.Sequential(nn.Linear(2, 1))
    with actviz.watch(model, out=tmp_path, every=1) as w:
        model(torch.randn(1, 2)).sum().backward()
        w.step()
    again = read_log(tmp_path)
    assert again.runs == 2 and [r["step"] for r in again.steps] == [0]
