"""A NaN loss named where it was made (the loss computation, or the module before it), in the
log, the flags, the report and TensorBoard; one origin per place, with its first step."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import actviz
from actviz.errors import NonFiniteError
from actviz.monitor import read_log
from actviz.monitor.report import build_training_report
from tests.test_monitor import batch, make_model


def train_with_loss(model, optimizer, w, steps, *, bad_from, make_nan=True):  # type: ignore[no-untyped-def]
    """Cross-entropy, and from step ``bad_from`` on the log of a negative number added."""
    for step in range(steps):
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        if step >= bad_from and make_nan:
            loss = loss + torch.log(-loss.detach() - 1.0)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        w.step(loss=loss)


def test_a_nan_loss_is_named_as_the_loss_computations(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with (
        pytest.warns(RuntimeWarning, match="the loss was NaN at step 2; every module's output"),
        actviz.watch(model, optimizer, every=1, out=tmp_path) as w,
    ):
        train_with_loss(model, optimizer, w, 4, bad_from=2)
    # log(negative) has a finite gradient: the weights stay finite, the loss is the one origin,
    # once, at its first step, seen at the two steps it was NaN.
    assert len(w.origins) == 1
    origin = w.origins[0]
    assert (origin.phase, origin.module, origin.value) == ("forward", "(loss)", "NaN")
    assert (origin.step, origin.count) == (2, 2)
    log = read_log(tmp_path)
    event = log.first_nonfinite
    assert event is not None
    assert (event["step"], event["module"]) == (2, "(loss)")
    assert event["message"] == (
        "the loss was NaN at step 2; every module's output was finite, so the loss "
        "computation made it"
    )
    assert [len(log.nonfinite)] == [1]
    record = log.steps[2]
    assert record["loss"] is None
    assert record["loss_nonfinite"]["value"] == "NaN"
    assert "loss computation made it" in record["loss_nonfinite"]["message"]
    assert "loss_nonfinite" not in log.steps[1]
    flags = [f for f in w.flags if (f.kind, f.target) == ("nonfinite", "loss")]
    assert [f.step for f in flags] == [2]
    assert "the loss computation made it" in flags[0].message

    page = build_training_report(tmp_path).read_text(encoding="utf-8")
    assert "no NaN or Inf" not in page
    assert '<div class="banner" role="alert" id="first-nonfinite">' in page
    assert "the loss was NaN at step 2; every module&#39;s output was finite" in page


def test_a_nan_loss_after_a_nan_module_names_the_module() -> None:
    from actviz.monitor.nonfinite import Origin
    from actviz.monitor.origins import loss_message

    made = Origin("forward", "3", "Divide", "NaN")
    assert loss_message("NaN", 5, [made], watched=True) == (
        "the loss was NaN at step 5; 3 (Divide) made the first NaN in the forward pass"
    )
    assert "not known" in loss_message("Inf", 5, [], watched=False)


def test_a_nan_module_before_the_loss_is_the_origin(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model[3].by = 0.0  # 0/0 in the module: the loss is NaN because of it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
            train_with_loss(model, optimizer, w, 4, bad_from=99)
    assert [(o.module, o.step) for o in w.origins][:1] == [("3", 0)]
    assert all(o.module != "(loss)" for o in w.origins)
    note = read_log(tmp_path).steps[0]["loss_nonfinite"]
    assert note["message"].startswith("the loss was NaN at step 0; 3 (Divide) made the first")


def test_origins_are_one_per_place_with_their_first_step(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with actviz.watch(model, optimizer, every=0, out=tmp_path) as w:
            for step in range(6):
                x, y = batch(step)
                if step == 2:
                    with torch.no_grad():
                        model[0].weight[0, 0, 0, 0] = math.nan  # NaN weights from here on
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.zero_grad()  # no update: the NaN stays where it was put
                w.step(loss=loss)
    assert [(o.phase, o.module, o.step, o.count) for o in w.origins] == [("forward", "0", 2, 4)]


def test_raise_names_the_loss(tmp_path: Path) -> None:
    model = make_model()
    with (
        pytest.raises(
            NonFiniteError, match=r"the loss was NaN at step 1; every module's output was finite"
        ) as caught,
        actviz.watch(model, out=tmp_path, on_nonfinite="raise") as w,
    ):
        train_with_loss(model, None, w, 3, bad_from=1)
    assert caught.value.module == "(loss)"


def test_the_report_is_red_for_a_nan_loss_with_the_watch_off(tmp_path: Path) -> None:
    model = make_model()
    with actviz.watch(model, every=1, out=tmp_path, on_nonfinite="off") as w:
        train_with_loss(model, None, w, 2, bad_from=1)
    assert w.origins == []
    page = build_training_report(tmp_path).read_text(encoding="utf-8")
    assert "no NaN or Inf" not in page
    assert "First non-finite loss: the loss was NaN at step 1; the non-finite watch was off" in page


def test_tensorboard_marks_a_nan_loss(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = make_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with actviz.watch(model, every=1, out=tmp_path, tensorboard=True) as w:
            train_with_loss(model, None, w, 3, bad_from=1)
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [0]  # TensorBoard has no NaN point
    assert [(e.step, e.value) for e in acc.Scalars("train/loss/nonfinite")] == [(1, 1.0), (2, 1.0)]
