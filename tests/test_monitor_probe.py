"""The probe filmstrip on the first drawing's scale says what each frame really holds: its
values' range and the share of them outside that scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

import actviz
from actviz.monitor import read_log
from actviz.monitor.probe import spread_share, value_spread
from actviz.monitor.report import build_training_report
from tests.test_monitor import batch, make_model


def test_a_frame_past_the_first_scale_says_its_range_and_clipped_share(tmp_path: Path) -> None:
    model = make_model()
    with actviz.watch(model, every=1, out=tmp_path, probe=batch(99)[0], probe_every=2) as w:
        for step in range(3):
            x, y = batch(step)
            if step == 1:
                with torch.no_grad():
                    model[0].weight.mul_(1000.0)  # the first conv's outputs grow 1000x
            nn.functional.cross_entropy(model(x), y).backward()
            model.zero_grad()
            w.step()
    probes = read_log(tmp_path).probes
    assert [p["step"] for p in probes] == [0, 2]
    first, later = probes[0]["ranges"]["0"], probes[1]["ranges"]["0"]
    assert first["clipped"] == 0.0
    assert later["scale"] == first["scale"]
    assert later["max"] > 100 * first["scale"][1] or later["min"] < 100 * first["scale"][0]
    assert later["clipped"] > 0.9
    page = build_training_report(tmp_path).read_text(encoding="utf-8")
    caption = f"values {later['min']:.4g} to {later['max']:.4g}, "
    assert caption in page
    assert f"{later['clipped']:.1%} clipped" in page
    # Written elsewhere, the page still finds the frames in the log's folder.
    import re

    for target in (tmp_path / "report.html", tmp_path.parent / "elsewhere" / "r.html"):
        built = build_training_report(tmp_path, target)
        sources = re.findall(r'<img class="frame" src="([^"]+)"', built.read_text(encoding="utf-8"))
        assert len(sources) == 8 and all((built.parent / src).is_file() for src in sources)


def test_value_spread_counts_values_outside_the_scale() -> None:
    array = np.array([[-3.0, -1.0, 0.0], [0.5, 1.0, np.nan]], dtype=np.float32)
    seen = value_spread(array, (-1.0, 0.75))
    assert seen == {"min": -3.0, "max": 1.0, "scale": [-1.0, 0.75], "clipped": 0.4}
    assert value_spread(np.full(3, np.nan), (0.0, 1.0))["clipped"] is None
    assert [spread_share(v) for v in (0.0, 0.001, 0.4, 0.999, 1.0)] == [
        "0%",
        "<1%",
        "40%",
        ">99%",
        "100%",
    ]
