"""Flags over training and the HTML report of a training log: content, escaping, the command,
and the page in headless Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import actviz
from actviz.cli import app
from actviz.monitor import read_log
from actviz.monitor.flags import FlagTracker, replay
from actviz.monitor.report import build_training_report
from tests.test_monitor import batch, make_model, train


def test_exploding_gradient_flagged_at_the_step_it_starts(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        for step in range(12):
            x, y = batch(step)
            scale = 1.0 if step < 8 else 10.0 ** (step - 5)  # grows from step 8 on
            loss = nn.functional.cross_entropy(model(x), y) * scale
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step(loss=loss)
    exploding = [f for f in w.flags if f.kind == "exploding_grad" and f.target == "(total)"]
    assert [f.step for f in exploding] == [8]
    assert [f.step for f in w.flags if f.kind == "loss_spike"] == [8]
    # The report replays the same flags from the log, and the log holds them at their step.
    log = read_log(tmp_path)
    assert replay(log.steps) == w.flags
    assert any(f["kind"] == "exploding_grad" for f in log.steps[8].get("flags", []))


def test_flags_begin_once_and_end_after_clean_steps() -> None:
    tracker = FlagTracker()
    layer = {"shape": [1, 100], "grad_norm": 1.0}
    zeros = [0.1, 0.1, 0.95, 0.97, 0.2, 0.2, 0.2, 0.99]
    began = []
    for step, frac in enumerate(zeros):
        record = {
            "step": step,
            "layers": {"relu": {**layer, "zero_frac": frac}},
            "params": {"w": {"update_ratio": 0.5}},
        }
        began += [(f.kind, f.step) for f in tracker.update(record)]
    assert began == [
        ("update_ratio_high", 0),
        ("dead_units", 2),
        ("dead_units", 7),  # cleared for three records in between
    ]


def test_vanishing_layer_flagged() -> None:
    layers = {f"l{i}": {"shape": [4, 8], "grad_norm": 1.0, "zero_frac": 0.0} for i in range(4)}
    layers["l0"]["grad_norm"] = 1e-6
    flags = FlagTracker().update({"step": 5, "layers": layers})
    assert [(f.kind, f.target, f.step) for f in flags] == [("vanishing_grad", "l0", 5)]


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose division makes a NaN at step 5, with a layer named like markup."""
    out = tmp_path_factory.mktemp("watch")
    model = make_model()
    model.add_module("<b>head</b>", nn.Linear(3, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def inject(step: int) -> None:
        if step == 5:
            model[3].by = 0.0

    with pytest.warns(RuntimeWarning), actviz.watch(model, optimizer, every=1, out=out) as w:
        train(model, optimizer, w, 7, clip=1.0, on_step=inject)
    return out


def test_report_content(nan_run: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(nan_run)])
    assert result.exit_code == 0, result.output
    page = nan_run / "report.html"
    assert result.output.strip() == str(page)
    html = page.read_text(encoding="utf-8")
    # The first non-finite origin at the top, before every chart.
    banner = re.search(r'<div class="banner"[^>]*id="first-nonfinite">(.*?)</div>', html, re.S)
    assert banner is not None
    assert "<code>3</code> (Divide) in the forward pass at step 5" in banner.group(1)
    assert html.index("first-nonfinite") < html.index("<svg")
    # The flags table names the kinds with the step they began.
    rows = re.findall(r'<tr class="flagged"><td class=n>(\d+)</td><td><span[^>]*>([a-z_]+)<', html)
    assert ("5", "nonfinite") in rows
    # Charts: loss, clip norms, the heatmap, update ratios, one per layer statistic.
    assert html.count("<svg") >= 8
    assert 'aria-label="gradient norm reaching each layer (log colour)"' in html
    assert 'aria-label="total gradient norm (log)"' in html
    # Its two lines have a key: which colour is before clipping and which after.
    norms = html[html.index('aria-label="total gradient norm (log)"') :]
    norms = norms[: norms.index("</svg>")]
    assert ">before clipping</text><rect" in norms and ">after clipping</text><rect" in norms
    assert "Total gradient norm, before and after clipping" in html
    assert "update / weight ratio per parameter (log)" in html
    heat = html[html.index('aria-label="gradient norm reaching each layer') :]
    heat = heat[: heat.index("</svg>")]
    assert "<title>4 at step 5:" in heat  # a layer after the origin, its cell at that step
    assert '#b3261e"><title>4 at step 6' in heat  # red: NaN in the layer
    # Every name is escaped: a module called "<b>head</b>" shows as text.
    assert "<b>head</b>" not in html
    assert "&lt;b&gt;head&lt;/b&gt;" in html


def test_a_loop_that_does_not_clip_gets_one_gradient_norm_line(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with actviz.watch(model, optimizer, every=1, out=tmp_path) as w:
        train(model, optimizer, w, 3, clip=1e9)  # a bound never reached
    html = build_training_report(tmp_path).read_text(encoding="utf-8")
    norms = html[html.index('aria-label="total gradient norm (log)"') :]
    norms = norms[: norms.index("</svg>")]
    assert "clipping" not in norms and "before and after clipping" not in html
    assert norms.count("<polyline") == 1  # the one line: what the optimizer stepped on


def test_report_while_running_and_errors(nan_run: Path, tmp_path: Path) -> None:
    # A log cut short (no end record, a torn line) still renders, and says so.
    lines = (nan_run / "watch.jsonl").read_bytes().split(b"\n")
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "watch.jsonl").write_bytes(b"\n".join(lines[:4]) + b'\n{"kind":"st')
    page = actviz.monitor.report.build_training_report(cut)
    html = page.read_text(encoding="utf-8")
    assert "still going" in html and "1 skipped" in html
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert result.exit_code == 1
    assert "no training log at" in result.output
    assert not (tmp_path / "nothing").exists()


def test_report_in_headless_chromium(nan_run: Path, tmp_path: Path) -> None:
    from tests.test_report_browser import BROWSER_FLAGS, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed; install it with `apt-get install chromium`")
    page = actviz.monitor.report.build_training_report(nan_run, tmp_path / "page.html")
    done = subprocess.run(
        [
            chromium,
            *BROWSER_FLAGS,
            f"--user-data-dir={tmp_path / 'p'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # The browser parsed the inline SVG as SVG elements, the banner first.
    assert done.stdout.count("<svg") >= 8
    assert done.stdout.count("<polyline") > 10
    assert 'id="first-nonfinite"' in done.stdout
