"""cam-eval's metrics: a planted model whose logit reads only one quadrant, the curves against a
brute-force loop, the confidence change against pytorch-grad-cam's, and the summary's verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actviz.cam_eval.metrics import (
    Protocol,
    baseline_maps,
    blurred,
    confidence_change,
    perturbation_curves,
    spearman,
)
from actviz.cam_eval.result import CamEvalResult
from actviz.cam_eval.summary import bootstrap_mean, summarize

SIZE = 32
HALF = SIZE // 2


class QuadrantContrast(nn.Module):
    """Class 0's logit is the local contrast of the top-left quadrant, nothing else: blur or
    zeros there lower it, whatever happens in the other three quadrants."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x[:, :, :HALF, :HALF]
        contrast = (q[..., 1:, :] - q[..., :-1, :]).abs().mean(dim=(1, 2, 3)) + (
            q[..., :, 1:] - q[..., :, :-1]
        ).abs().mean(dim=(1, 2, 3))
        logit = 12 * (contrast / 2 - 0.25)
        return torch.stack([logit, torch.zeros_like(logit)], dim=1)


def _noise(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


def _quadrant(n: int, rows: slice, cols: slice) -> torch.Tensor:
    maps = torch.zeros(n, SIZE, SIZE)
    maps[:, rows, cols] = 1.0
    return maps


def test_the_right_quadrant_beats_every_baseline_and_the_wrong_one_loses() -> None:
    model, x = QuadrantContrast().eval(), _noise(8)
    protocol = Protocol(steps=16)
    maps = {
        "right": _quadrant(8, slice(0, HALF), slice(0, HALF)),
        "wrong": _quadrant(8, slice(HALF, SIZE), slice(HALF, SIZE)),
        **baseline_maps(x, (4, 4), protocol, seeds=range(8)),
    }
    scores = perturbation_curves(model, x, maps, [0] * 8, protocol, batch_size=50)
    p = model(x).softmax(dim=1)[:, 0].double()
    records = []
    for i in range(8):
        per = {}
        for name, s in scores.items():
            change = confidence_change(p[i : i + 1], s.masked[i : i + 1])
            per[name] = {
                "deletion_auc": float(s.deletion_auc[i]),
                "insertion_auc": float(s.insertion_auc[i]),
                "deletion": s.deletion[i].tolist(),
                "insertion": s.insertion[i].tolist(),
                **{k: float(v[0]) for k, v in change.items()},
            }
        records.append({"status": "ok", "scores": per})
    summary = summarize(records, list(maps), [])
    right, wrong = summary["right"]["metrics"], summary["wrong"]["metrics"]
    for base in ("random", "gaussian", "sobel"):
        other = summary[base]["metrics"]
        assert right["deletion_auc"]["mean"] < other["deletion_auc"]["mean"]
        assert right["insertion_auc"]["mean"] > other["insertion_auc"]["mean"]
        assert right["drop_pct"]["mean"] < other["drop_pct"]["mean"]
        # Every image agrees: the paired interval lies on the right side of 0.
        assert summary["right"]["beats"].get(base, {}).get("overall") in (None, "yes")
    # The planted map keeps the quadrant: no drop at all; the wrong one removes it.
    assert right["drop_pct"]["mean"] == pytest.approx(0.0, abs=1e-4)  # float32 logits
    assert wrong["drop_pct"]["mean"] > 50
    assert wrong["deletion_auc"]["mean"] > right["deletion_auc"]["mean"] + 0.1
    assert wrong["insertion_auc"]["mean"] < right["insertion_auc"]["mean"] - 0.1
    assert summary["wrong"]["beats"]["random"]["overall"] != "yes"


def _brute_force(
    model: nn.Module, x: torch.Tensor, heat: np.ndarray, target: int, steps: int
) -> tuple[list[float], list[float], float, float]:
    """One image, one step at a time: rank pixels by the map (ties in row-major order), delete
    to zeros or insert into the blurred image, and take the trapezoid by hand."""
    h, w = heat.shape
    order = sorted(range(h * w), key=lambda k: (-heat.flat[k], k))
    step = -(-(h * w) // steps)
    base = blurred(x[None], 11, 5.0)[0]
    deletion, insertion, xs = [], [], []
    for i in range(steps + 1):
        count = min(i * step, h * w)
        gone = np.zeros(h * w, dtype=bool)
        gone[order[:count]] = True
        mask = torch.from_numpy(gone.reshape(h, w))
        with torch.no_grad():
            d = torch.where(mask, torch.zeros_like(x), x)
            ins = torch.where(mask, x, base)
            deletion.append(float(model(d[None]).softmax(1)[0, target]))
            insertion.append(float(model(ins[None]).softmax(1)[0, target]))
        xs.append(count / (h * w))
    area = [
        sum((c[j] + c[j + 1]) / 2 * (xs[j + 1] - xs[j]) for j in range(steps))
        for c in (deletion, insertion)
    ]
    return deletion, insertion, area[0], area[1]


def _small_classifier() -> nn.Module:
    """Five classes from a 3-channel image of any size, seeded."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, 5),
    ).eval()


def test_curves_and_areas_equal_a_brute_force_loop() -> None:
    model = _small_classifier()
    x = _noise(3, seed=4)[:, :, :20, :24]
    low = torch.rand(3, 5, 6, generator=torch.Generator().manual_seed(2))
    low[0, 1, 1] = low[0, 2, 2]  # a tie, broken by position
    steps = 7
    scores = perturbation_curves(
        model, x, {"m": low}, [1, 4, 0], Protocol(steps=steps), batch_size=5
    )["m"]
    up = F.interpolate(low[:, None], size=(20, 24), mode="bilinear", align_corners=False)[:, 0]
    for i, target in enumerate([1, 4, 0]):
        deletion, insertion, d_area, i_area = _brute_force(
            model, x[i], up[i].numpy(), target, steps
        )
        np.testing.assert_allclose(scores.deletion[i].numpy(), deletion, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(scores.insertion[i].numpy(), insertion, rtol=1e-5, atol=1e-7)
        assert float(scores.deletion_auc[i]) == pytest.approx(d_area, rel=1e-5)
        assert float(scores.insertion_auc[i]) == pytest.approx(i_area, rel=1e-5)
        with torch.no_grad():
            masked = model((x[i] * up[i])[None]).softmax(1)[0, target]
        assert float(scores.masked[i]) == pytest.approx(float(masked), rel=1e-5)


def test_drop_and_increase_equal_pytorch_grad_cam() -> None:
    metrics = pytest.importorskip("pytorch_grad_cam.metrics.cam_mult_image")
    targets_mod = pytest.importorskip("pytorch_grad_cam.utils.model_targets")
    model = _small_classifier()
    x = _noise(6, seed=7)[:, :, :16, :16]
    cams = torch.rand(6, 16, 16, generator=torch.Generator().manual_seed(8))
    cams[0] = 1.0  # the whole image kept: no change at all
    targets = [0, 1, 2, 3, 4, 1]
    scores = perturbation_curves(model, x, {"m": cams}, targets, Protocol(steps=2))["m"]
    with torch.no_grad():
        p = model(x).softmax(dim=1).double()[range(6), targets]
    ours = confidence_change(p, scores.masked)
    wanted = [targets_mod.ClassifierOutputSoftmaxTarget(t) for t in targets]
    drop = metrics.DropInConfidence()(x, cams.numpy(), wanted, model)
    increase = metrics.IncreaseInConfidence()(x, cams.numpy(), wanted, model)
    np.testing.assert_allclose(ours["drop"].numpy(), drop, atol=1e-6)
    np.testing.assert_allclose(ours["increase"].numpy(), increase)
    np.testing.assert_allclose(
        ours["drop_pct"].numpy(), 100 * drop / p.numpy(), rtol=1e-4, atol=1e-5
    )
    assert float(ours["drop"][0]) == 0.0 and float(ours["increase"][0]) == 0.0
    assert 0 < float(ours["increase"].sum()) < 6 or float(ours["drop"].sum()) > 0


def test_baselines_spearman_and_bootstrap() -> None:
    x = torch.zeros(2, 3, 12, 16)
    x[:, :, :, 8:] = 1.0  # one vertical edge
    maps = baseline_maps(x, (3, 4), Protocol(), seeds=[5, 5])
    assert maps["random"].shape == (2, 3, 4) and torch.equal(maps["random"][0], maps["random"][1])
    gauss = maps["gaussian"][0]
    assert gauss.shape == (12, 16) and float(gauss.max()) == 1.0
    assert torch.equal(gauss, gauss.flip(0)) and torch.equal(gauss, gauss.flip(1))
    edges = maps["sobel"][0]
    assert float(edges[:, 7:9].min()) == 1.0 and float(edges[:, :6].max()) == 0.0
    a = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    assert spearman(a, a * 10) == [pytest.approx(1.0)]
    assert spearman(a, -a) == [pytest.approx(-1.0)]
    tied = torch.tensor([[[0.0, 0.0, 1.0, 2.0]]])
    from scipy.stats import spearmanr

    expected = spearmanr([0, 0, 1, 2], [4, 3, 2, 1]).statistic
    assert spearman(tied, torch.tensor([[[4.0, 3.0, 2.0, 1.0]]])) == [pytest.approx(expected)]
    assert spearman(torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)) == [1.0]
    assert spearman(torch.zeros(1, 1, 4), a) == [None]
    ci = bootstrap_mean([1.0, 2.0, 3.0, 4.0])
    assert ci["mean"] == 2.5 and 1.0 <= ci["low"] < 2.5 < ci["high"] <= 4.0
    assert bootstrap_mean([3.0]) == {"mean": 3.0, "low": 3.0, "high": 3.0}


def _plain_record(balance: float, sanity: list[float | None]) -> dict[str, Any]:
    scores = {
        name: {
            "deletion_auc": 0.1,
            "insertion_auc": 0.1 + (balance if name == "gradcam" else 0.0),
            "drop_pct": 50.0,
            "increase": 0.0,
            "deletion": [1.0, 0.0],
            "insertion": [0.0, 1.0],
        }
        for name in ("gradcam", "random", "gaussian", "sobel")
    }
    flat = {name: [1.0, 1.0] for name in ("random", "gaussian", "sobel")}
    return {"status": "ok", "scores": scores, "sanity": {"gradcam": sanity, **flat}}


def test_a_verdict_needs_six_images_and_differences_that_are_not_negligible() -> None:
    """Six images that all agree conclude (a sign test's p is 0.031), five do not (0.0625);
    areas that move by 1e-5 (a target at probability 3e-4) conclude nothing, however many
    images agree."""
    names, stages = ["gradcam", "random", "gaussian", "sobel"], ["fc"]
    agree = [_plain_record(0.1 + 0.01 * i, [0.5]) for i in range(6)]
    assert summarize(agree, names, stages)["gradcam"]["beats"]["random"]["overall"] == "yes"
    assert summarize(agree[:5], names, stages)["gradcam"]["beats"]["random"]["overall"] == "n/a"
    tiny = [_plain_record(1e-5 * (i + 1), [0.5]) for i in range(8)]
    beats = summarize(tiny, names, stages)["gradcam"]["beats"]["random"]
    assert (beats["overall"], beats["insertion_auc"]) == ("n/a", "n/a")
    assert beats["drop_pct"] == "tie"  # equal drops: a tie, not a lack of evidence


def test_one_image_gives_no_verdict_and_sanity_means_say_their_count() -> None:
    from actviz.cli.cam_eval import _rows
    from actviz.report.cam_eval import cam_eval_page

    names, stages = ["gradcam", "random", "gaussian", "sobel"], ["fc", "layer4.1"]
    one = summarize([_plain_record(0.3, [0.5, 0.2])], names, stages)
    assert {v["overall"] for v in one["gradcam"]["beats"].values()} == {"n/a"}
    # Three images that agree cannot conclude (a bootstrap of them would say yes); a
    # constant map's correlation is left out.
    records = [
        _plain_record(0.3, [None, 0.8]),
        _plain_record(0.2, [None, -0.6]),
        _plain_record(0.4, [0.1, None]),
    ]
    summary = summarize(records, names, stages)
    assert summary["gradcam"]["beats"]["random"]["overall"] == "n/a"
    first, last = summary["gradcam"]["sanity"]["stages"]
    assert (first["images"], first["spearman"]["mean"]) == (1, pytest.approx(0.1))
    assert (last["images"], last["spearman"]["mean"]) == (2, pytest.approx(0.1))
    assert summary["random"]["sanity"]["stages"][1]["images"] == 3
    result = CamEvalResult(
        out=Path("out"),
        record=Path("out/cam-eval.json"),
        layer="layer4.1",
        methods=["gradcam"],
        summary=summary,
        images=[dict(r, image=f"im{i}.png", path=f"im{i}.png") for i, r in enumerate(records)],
        random_weights=False,
        seconds=1.0,
        device="cpu",
    )
    cells = {row[0][0]: row[0][-1] for row in _rows(result)}
    assert cells["Grad-CAM"] == "0.10 (2 of 3)" and cells["(random)"].startswith("1.00 UNCHANGED")
    page = cam_eval_page(
        {
            "summary": summary,
            "metrics": {},
            "images": result.images,
            "sanity": {"blocks": stages, "threshold": 0.9},
            "titles": {"gradcam": "Grad-CAM"},
            "bootstrap": {"level": 0.95},
        }
    ).decode()
    sanity = page[page.index("<h2>Sanity check") :]
    assert "0.10 (1 of 3)" in sanity and "0.10 (2 of 3)" in sanity
    assert "1.00 (" not in sanity  # every image counted: no count shown
