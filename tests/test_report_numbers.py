"""Numbers the reports show that must not mislead: axis labels on every chart, told apart, a
fraction's axis within 0 and 1, percentiles over few images."""

from __future__ import annotations

import math
import re

import pytest

from actviz.report.charts import tick_labels
from actviz.report.timeline import line_chart
from actviz.report.training import training_page

_Y_LABEL = re.compile(r'<text x="54\.0" y="[^"]+" text-anchor="end" fill="#59636e">([^<]+)</text>')


def y_labels(svg: str) -> list[str]:
    return _Y_LABEL.findall(svg)


def test_a_narrow_loss_has_distinct_tick_labels() -> None:
    steps = list(range(6))
    loss = [2.30211, 2.30215, 2.3022, 2.30258, 2.30231, 2.30224]
    labels = y_labels(line_chart(steps, {"loss": loss}, title="loss"))
    assert len(labels) >= 3
    assert len(set(labels)) == len(labels), labels
    numbers = [float(label) for label in labels]
    assert numbers == sorted(numbers)
    assert min(loss) - 1e-4 <= numbers[0] and numbers[-1] <= max(loss) + 1e-4


def test_a_log_chart_within_one_decade_has_labels() -> None:
    steps = list(range(5))
    norms = [1.7, 2.2, 3.4, 2.0, 2.9]
    labels = y_labels(line_chart(steps, {"n": norms}, title="norm (log)", log=True))
    assert len(labels) >= 2, labels
    assert len(set(labels)) == len(labels)
    values = [float(label) for label in labels]  # 1e0 reads as a float too
    assert all(1.5 <= v <= 3.6 for v in values), values
    # Narrower than a factor of two: still labelled, as a linear axis of its values.
    tight = y_labels(line_chart(steps, {"n": [1.30, 1.31, 1.32, 1.31, 1.30]}, title="t", log=True))
    assert len(tight) >= 2 and len(set(tight)) == len(tight), tight
    # Over decades: the powers of ten, as before.
    wide = y_labels(line_chart(steps, {"n": [1e-3, 1e-1, 10.0, 1.0, 1e2]}, title="w", log=True))
    assert wide[:2] == ["1e-3", "1e-2"]


def test_a_fraction_axis_stays_within_zero_and_one() -> None:
    steps = list(range(4))
    for fractions in ([0.0] * 4, [1.0] * 4, [0.0, 0.02, 0.01, 0.0], [0.2, 0.5, 0.9, 1.0]):
        svg = line_chart(steps, {"relu": fractions}, title="zeros", limits=(0.0, 1.0))
        values = [float(label) for label in y_labels(svg)]
        assert len(values) >= 2, (fractions, values)
        assert all(0.0 <= v <= 1.0 for v in values), (fractions, values)


def test_the_training_page_draws_zero_fractions_on_zero_to_one() -> None:
    steps = [
        {
            "step": s,
            "loss": 1.0 + 0.0001 * s,
            "grad_norm": 2.0 + 0.1 * s,
            "layers": {
                "conv": {"mean": 0.1, "std": 1.0, "zero_frac": 0.0, "grad_norm": 0.3 + 0.01 * s}
            },
        }
        for s in range(5)
    ]
    page = training_page({"model": "M", "every": 1}, steps, [], []).decode()
    charts = {
        m.group(1): m.group(0)
        for m in re.finditer(r'<svg [^>]*aria-label="([^"]+)".*?</svg>', page, re.S)
    }
    zeros = [float(v) for v in y_labels(charts["fraction of zeros (dead units)"])]
    assert zeros and min(zeros) == 0.0 and max(zeros) <= 1.0
    for title in ("loss", "total gradient norm (log)", "norm of the gradient reaching the layer"):
        labels = y_labels(charts[title])
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (title, labels)


def test_tick_labels_are_distinct_and_clean() -> None:
    assert tick_labels([0.1, 0.2, 0.30000000000000004]) == ["0.1", "0.2", "0.3"]
    assert tick_labels([1.2001, 1.2002, 1.2003]) == ["1.2001", "1.2002", "1.2003"]
    assert tick_labels([-1e-17, 0.5, 1.0]) == ["0", "0.5", "1"]
    assert not any(math.isnan(float(v)) for v in tick_labels([0.0, 1e-9]))


def test_percentiles_of_an_earlier_summary_interpolate_below_101_images() -> None:
    import numpy as np

    from actviz.report.earlier import _quantiles

    values = [4.0, 1.0, 10.0, 2.0, 3.0]
    got = _quantiles(values)
    for key, q in (("p01", 0.01), ("p50", 0.5), ("p99", 0.99)):
        assert got[key] == pytest.approx(float(np.quantile(values, q)), rel=1e-12)
    assert got["p01"] > min(values) and got["p99"] > sorted(values)[-2]
    assert _quantiles([7.0]) == {"p01": 7.0, "p50": 7.0, "p99": 7.0}


def test_a_tied_head_predicts_no_class() -> None:
    import torch

    from actviz.top_images.scoring import predicted_classes

    # A head that outputs all zeros ties every class: argmax's class 0 is no prediction.
    assert predicted_classes(torch.zeros(3, 1000), 3).tolist() == [-1, -1, -1]
    assert predicted_classes(torch.tensor([[0.0, 2.0, 1.0], [3.0, 3.0, 0.0]]), 2).tolist() == [
        1,
        -1,
    ]
    assert predicted_classes(torch.tensor([[0.5], [-2.0]]), 2).tolist() == [0, 0]
