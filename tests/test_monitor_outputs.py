"""The training monitor's TensorBoard files read back with TensorBoard's own reader, and the
probe batch's filmstrip."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import actviz
from actviz.errors import UsageError
from actviz.monitor import read_log
from actviz.monitor.probe import ProbeSink, spread
from actviz.monitor.report import build_training_report
from actviz.monitor.tensorboard import HIST_EDGES
from tests.test_monitor import make_model, train

pytest.importorskip("tensorboard")


def events(folder: Path):  # type: ignore[no-untyped-def]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    acc.Reload()
    return acc


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four steps with TensorBoard and a probe drawn every 2; at step 3 one output channel
    of the second convolution turns NaN (a NaN in its weights)."""
    out = tmp_path_factory.mktemp("tb")
    model = make_model().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(5))

    def inject(step: int) -> None:
        if step == 3:
            with torch.no_grad():
                model[4].weight[0, 0, 0, 0] = float("nan")

    with (
        pytest.warns(RuntimeWarning),
        actviz.watch(
            model, optimizer, every=1, out=out, tensorboard=True, probe=probe, probe_every=2
        ) as w,
    ):
        train(model, optimizer, w, 4, clip=1.0, on_step=inject)
    return out


def test_tensorboard_scalars_and_histograms_read_back(run: Path) -> None:
    log = read_log(run)
    acc = events(run / "tensorboard")
    tags = acc.Tags()
    losses = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert [s for s, _ in losses] == [0, 1, 2]  # step 3's loss is NaN: left out
    for (step, value), record in zip(losses, log.steps, strict=False):
        assert step == record["step"]
        assert value == pytest.approx(record["loss"], rel=1e-6)
    means = {e.step: e.value for e in acc.Scalars("layers/4/mean")}
    assert means[2] == pytest.approx(log.steps[2]["layers"]["4"]["mean"], rel=1e-5, abs=1e-7)
    nans = {e.step: e.value for e in acc.Scalars("layers/4/nan")}
    assert nans[3] == log.steps[3]["layers"]["4"]["nan"] > 0
    ratios = acc.Scalars("params/0.weight/update_ratio")
    assert ratios[0].value == pytest.approx(log.steps[0]["params"]["0.weight"]["update_ratio"])
    assert "activations/4" in tags["histograms"]
    histograms = {e.step: e.histogram_value for e in acc.Histograms("activations/4")}
    assert sorted(histograms) == [0, 1, 2, 3]
    clean = histograms[2]
    row = log.steps[2]["layers"]["4"]
    assert clean.num == 4 * 4 * 6 * 6
    assert sum(clean.bucket) == clean.num
    assert clean.min == pytest.approx(row["min"]) and clean.max == pytest.approx(row["max"])
    # Fixed edges: every limit is one of HIST_EDGES, whatever the layer's range.
    assert set(clean.bucket_limit) <= set(HIST_EDGES)
    # At step 3 the NaN/Inf values are counted apart: the histogram holds the finite ones.
    broken = histograms[3]
    bad = log.steps[3]["layers"]["4"]
    assert 0 < bad["nan"] <= 4 * 6 * 6  # within one channel of each of the 4 images
    assert broken.num == clean.num - bad["nan"] - bad["inf"]
    # The probe's pictures are there too.
    assert {e.step for e in acc.Images("probe/0")} == {0, 2}


def test_probe_filmstrip(run: Path) -> None:
    log = read_log(run)
    assert [p["step"] for p in log.probes] == [0, 2]
    first, second = (_rgb(run / p["files"]["4"]) for p in log.probes)
    assert first.shape[1] == second.shape[1]
    # Training changed the maps: the pictures differ (their tiles, at the bottom).
    assert not np.array_equal(first[-60:], second[-60:])
    page = build_training_report(run).read_text(encoding="utf-8")
    assert page.count('class="frame"') == 2 * len(log.probes[0]["files"])
    assert "probe/4/step0000002.png" in page


def _rgb(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_probe_leaves_the_model_alone(tmp_path: Path) -> None:
    model = make_model().train()
    bn = model[1]
    before = bn.running_mean.clone()
    sink = ProbeSink(model, torch.randn(2, 3, 6, 6), ["0", "4", "6"], tmp_path, 1)
    files, pictures = sink.draw(0)
    assert set(files) == {"0", "4", "6"}
    assert torch.equal(bn.running_mean, before)  # ran in eval mode
    assert all(m.training for m in model.modules())  # and gave the flags back
    first_range = sink._ranges["4"]
    with torch.no_grad():
        model[4].weight.mul_(3.0)
    sink.draw(1)
    assert sink._ranges["4"] == first_range  # the scale of the first drawing
    assert pictures["4"].ndim == 3 and pictures["4"].shape[2] == 3
    assert spread([str(i) for i in range(20)], 4) == ["0", "6", "13", "19"]


def test_missing_tensorboard_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(UsageError) as caught:
        actviz.watch(make_model(), out=tmp_path, tensorboard=True)
    message = str(caught.value)
    assert "pip install 'actviz[tensorboard]'" in message and "\n" not in message
