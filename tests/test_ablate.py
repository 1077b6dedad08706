"""actviz.ablate on known answers: a planted circuit, a dead unit, the per-class table against
numpy's bincount, the linear-readout identity, the split forward, the modes recomputed by
hand, and a dictionary feature that never fires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import torchvision
from PIL import Image
from torch import nn

import actviz
from actviz.ablate.engine import Engine
from actviz.ablate.modes import parse_mode
from actviz.ablate.readout import linear_readout, pooled
from actviz.ablate.split import split_model
from actviz.ablate.targets import Direction, LayerGeometry, Units
from actviz.top_images.plan import output_plan

SIZE = 32


def planted() -> nn.Sequential:
    """Red squares reach class 0 only through channel 3 of the first convolution, blue ones
    class 1 only through channel 5; channel 0 is dead; class 2 wins on its bias alone."""
    torch.manual_seed(0)
    conv1, conv2, fc = nn.Conv2d(3, 6, 1), nn.Conv2d(6, 6, 3, padding=1), nn.Linear(6, 3)
    with torch.no_grad():
        for p in (*conv1.parameters(), *conv2.parameters(), *fc.parameters()):
            p.zero_()
        conv1.weight[3, :, 0, 0] = torch.tensor([1.0, -1.0, -1.0])  # red minus the rest
        conv1.weight[5, :, 0, 0] = torch.tensor([-1.0, -1.0, 1.0])  # blue minus the rest
        conv1.bias[3] = conv1.bias[5] = -2.0
        conv1.bias[0] = -1.0  # never above zero
        for c in (1, 2, 4):
            conv1.weight[c] = torch.randn(3, 1, 1)
        for c in range(6):
            conv2.weight[c, c, 1, 1] = 1.0
        conv2.weight[1, 2] = torch.randn(3, 3)
        fc.weight[0, 3] = fc.weight[1, 5] = 10.0
        fc.bias[2] = 0.5
    return nn.Sequential(
        conv1, nn.ReLU(), conv2, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc
    )


def squares(root: Path, per: int = 6, seed: int = 0) -> Path:
    """Class folders 0_red, 1_blue, 2_grey: a coloured square on noisy grey, or none."""
    rng = np.random.default_rng(seed)
    for name, colour in (("0_red", (255, 0, 0)), ("1_blue", (0, 0, 255)), ("2_grey", None)):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per):
            pixels = np.full((SIZE, SIZE, 3), 118, np.uint8)
            pixels += rng.integers(0, 20, pixels.shape, dtype=np.uint8)
            if colour is not None:
                y, x = rng.integers(0, SIZE // 2, 2)
                pixels[y : y + SIZE // 2, x : x + SIZE // 2] = colour
            Image.fromarray(pixels).save(root / name / f"im{i}.png")
    return root


def columns(path: Path) -> dict[str, np.ndarray]:
    """``ablate.parquet`` as numpy columns (the ablation's name decoded)."""
    table = pq.read_table(path).to_pydict()
    return {name: np.asarray(values) for name, values in table.items()}


def _geometry(module: nn.Module, layer: str, shape: tuple[int, ...], axis: int = 1) -> Any:
    plan, _ = output_plan(layer, layer, "Conv2d", shape, None, (SIZE, SIZE))
    assert plan is not None
    return LayerGeometry(layer, shape, axis, plan)


def _engine(
    model: nn.Module, layer: str, units: list[int], mode: str = "zero", shortcut: bool = True
) -> tuple[Engine, torch.Tensor]:
    x = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    model.eval()
    split = split_model(model, layer, x, lambda m, v: m(v), model_name="net")
    with torch.inference_mode():
        a, _ = split.prefix(x)
    geometry = _geometry(model, layer, tuple(a.shape[1:]))
    readout = linear_readout(split.graph) if shortcut and split.graph is not None else None
    return Engine(split, Units(units, geometry), parse_mode(mode), readout), x


def _logits(engine: Engine, x: torch.Tensor, masks: torch.Tensor, ref: Any = None) -> Any:
    with torch.inference_mode():
        a, others = engine.split.prefix(x)
        return engine.logits(a, others, masks, ref)


@pytest.mark.parametrize(("layer", "shortcut"), [("1", False), ("3", True)])
def test_planted_circuit_other_classes_bit_for_bit(layer: str, shortcut: bool) -> None:
    model = planted()
    engine, _ = _engine(model, layer, [0, 3, 5], shortcut=shortcut)
    assert (engine.readout is not None) == shortcut  # after conv2 the readout is linear
    images = []
    for colour in ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0), (0.5, 0.5, 0.5)):
        x = torch.full((3, SIZE, SIZE), 0.47)
        x[:, 4:20, 6:22] = torch.tensor(colour)[:, None, None]
        images.append((x - torch.tensor([0.485, 0.456, 0.406])[:, None, None]) / 0.226)
    x = torch.stack(images)
    before, after = _logits(engine, x, torch.eye(3, dtype=torch.bool))
    assert before.argmax(1).tolist() == [0, 1, 2]
    # Unit 3 (red) removed: the red image falls to class 2, classes 1 and 2 bit for bit.
    assert after[1].argmax(1).tolist() == [2, 1, 2]
    assert torch.equal(after[1][:, 1:], before[:, 1:])
    assert bool((after[1][0, 0] < before[0, 0] - 5).item())
    # The dead unit 0 changes nothing at all.
    assert torch.equal(after[0], before)
    # Unit 5 (blue): only class 1's logit moves.
    assert torch.equal(after[2][:, [0, 2]], before[:, [0, 2]])


@pytest.mark.slow
def test_planted_circuit_over_a_folder_and_the_table_against_bincount(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in")
    result = actviz.ablate(
        planted(),
        folder,
        layer="1",
        units="0,3",
        each=True,
        input_size=(SIZE, SIZE),
        out=tmp_path / "out",
        cases=2,
        rank_share=0.5,
    )
    assert result.labels == "folders" and result.images == 18
    red = {r["ablation"]: r for r in result.classes if r["class"] == "0_red"}
    assert red["unit 3"]["acc_before"] == 1.0 and red["unit 3"]["acc_after"] <= 0.05
    for row in result.classes:
        if row["ablation"] == "unit 0" or row["class"] != "0_red":
            assert row["acc_after"] == row["acc_before"] and row["dlogit"] == 0.0, row
    table = columns(result.table)
    assert set(table) == {
        "image",
        "label",
        "pred_before",
        "pred_after",
        "logit_before",
        "logit_after",
        "ablation",
    }
    assert len(table["image"]) == 18 * 2
    dead = table["ablation"] == "unit 0"
    assert (table["logit_after"][dead] == table["logit_before"][dead]).all()  # bit for bit
    for name in ("unit 0", "unit 3"):
        rows = {k: v[table["ablation"] == name] for k, v in table.items()}
        labels = rows["label"].astype(np.int64)
        n = np.bincount(labels, minlength=3)
        for when in ("before", "after"):
            pred = rows[f"pred_{when}"].astype(np.int64)
            hits = np.bincount(labels[pred == labels], minlength=3)
            predicted = np.bincount(pred, minlength=3)
            tnr = (len(labels) - n - (predicted - hits)) / (len(labels) - n)
            for c in range(3):
                row = next(r for r in result.classes if r["ablation"] == name and r["index"] == c)
                assert row["n"] == n[c]
                assert row[f"acc_{when}"] == pytest.approx(hits[c] / n[c], abs=1e-12)
                assert row[f"balanced_acc_{when}"] == pytest.approx(
                    (hits[c] / n[c] + tnr[c]) / 2, abs=1e-12
                )
        change = rows["logit_after"].astype(np.float64) - rows["logit_before"]
        sums = np.bincount(labels, weights=change, minlength=3)
        for c in range(3):
            row = next(r for r in result.classes if r["ablation"] == name and r["index"] == c)
            assert row["dlogit"] == pytest.approx(sums[c] / n[c], rel=1e-5, abs=1e-5)
    # The flow: every red image lost went to grey; the curves ranked unit 3 first for red.
    three = next(a for a in result.ablations if a["name"] == "unit 3")
    assert three["flow"] == [
        {"class": "0_red", "index": 0, "lost": 6, "to": [{"class": "2_grey", "index": 2, "n": 6}]}
    ]
    curve = next(c for c in result.curves if c["class"] == "0_red")
    assert curve["order"][0] == "3" and curve["sizes"] == [1, 2]
    assert curve["best"][0] == 0.0 and curve["worst"][0] == 1.0 and curve["n"] == 3
    assert (tmp_path / "out" / "curves.png").is_file() and len(result.cases) == 2


def test_linear_readout_identity_on_resnet18() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    split = split_model(model, "layer4", x, lambda m, v: m(v), model_name="resnet18")
    assert split.graph is not None and split.fallback is None
    readout = linear_readout(split.graph)
    assert readout is not None and readout.linear == "fc"
    with torch.inference_mode():
        a, others = split.prefix(x)
        logits = model(x)
    plan, _ = output_plan("layer4", "layer4", "Sequential", tuple(a.shape[1:]), None, (64, 64))
    assert plan is not None
    geometry = LayerGeometry("layer4", tuple(a.shape[1:]), 1, plan)
    units = list(range(0, 512, 8))
    masks = torch.eye(len(units), dtype=torch.bool)
    fast = Engine(split, Units(units, geometry), parse_mode("zero"), readout)
    slow = Engine(split, Units(units, geometry), parse_mode("zero"), None)
    with torch.inference_mode():
        before, after = fast.logits(a, others, masks)
        before_slow, after_slow = slow.logits(a, others, masks)
    assert torch.allclose(before, logits, atol=1e-5)
    assert torch.allclose(after, after_slow, atol=2e-5)
    assert torch.allclose(before, before_slow, atol=2e-5)
    # Removing channel c moves the logits by exactly -W[:, c] * pooled_c.
    p = pooled(a)
    for k, c in enumerate(units[:4]):
        expected = before - p[:, c : c + 1] * model.fc.weight[:, c][None]
        assert torch.allclose(after[k], expected, atol=1e-5)


def test_the_split_forward_equals_a_whole_forward() -> None:
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18().eval()
    x = torch.randn(2, 3, 64, 64)
    split = split_model(resnet, "layer3", x, lambda m, v: m(v), model_name="resnet18")
    assert split.graph is not None and split.stacks and split.frontier == ["layer3.1.relu_1"]
    with torch.inference_mode():
        a, others = split.prefix(x)
        assert torch.allclose(split.suffix(a, others, 1), resnet(x), atol=1e-6)
    # Inside a block a residual branch crosses the cut: the prefix hands it on too.
    split = split_model(resnet, "layer3.0.conv1", x, lambda m, v: m(v), model_name="resnet18")
    assert split.frontier == ["layer3.0.conv1", "layer2.1.relu_1"]
    with torch.inference_mode():
        a, others = split.prefix(x)
        twice = split.suffix(torch.cat([a, a]), others, 2)
        assert torch.allclose(twice, torch.cat([resnet(x)] * 2), atol=1e-6)


@pytest.mark.slow
def test_the_split_forward_of_a_vit_block_equals_a_whole_forward() -> None:
    torch.manual_seed(0)
    vit = torchvision.models.vit_b_16(image_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    layer = "encoder.layers.encoder_layer_6"
    split = split_model(vit, layer, x, lambda m, v: m(v), model_name="vit_b_16")
    assert split.graph is not None and split.fallback is None
    with torch.inference_mode():
        a, others = split.prefix(x)
        assert a.shape == (2, 5, 768)
        assert torch.allclose(split.suffix(a, others, 1), vit(x), atol=1e-6)


def test_modes_recomputed_by_hand() -> None:
    model = planted()
    x = torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    reference = torch.rand(2, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    masks = torch.ones(1, 2, dtype=torch.bool)
    for mode in ("mean", "scale:0.5", "steer:1.5"):
        engine, _ = _engine(model, "1", [1, 4], mode, shortcut=False)
        _, after = _logits(engine, x, masks, reference if mode == "mean" else None)
        with torch.inference_mode():
            a = model[1](model[0](x)).clone()
            if mode == "mean":
                a[:, [1, 4]] = reference
            elif mode == "scale:0.5":
                a[:, [1, 4]] *= 0.5
            else:
                a[:, [1, 4]] += 1.5
            expected = model[2:](a)
        assert torch.allclose(after[0], expected, atol=1e-6), mode
    # Steering along a direction adds alpha times it at every position.
    engine, _ = _engine(model, "1", [0])
    with torch.inference_mode():
        a, _ = engine.split.prefix(x)
    d = torch.tensor([0.0, 1.0, -2.0, 0.5, 0.0, 3.0])
    direction = Direction(d, _geometry(model, "1", tuple(a.shape[1:])), Path("d.npy"))
    old = direction.read(a)
    moved = direction.put(a, parse_mode("steer:2").values(old), old, torch.ones(1, dtype=bool))
    assert torch.allclose(moved - a, 2 * d[None, :, None, None].expand_as(a), atol=1e-6)
    assert torch.allclose(direction.read(moved), old + 2, atol=1e-6)
    removed = direction.put(a, parse_mode("zero").values(old), old, torch.ones(1, dtype=bool))
    assert torch.allclose(direction.read(removed), torch.zeros_like(old), atol=1e-5)


def test_mean_and_resample_over_a_folder(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in", per=3)
    common: dict[str, Any] = {
        "layer": "3",
        "units": "3,5",
        "input_size": (SIZE, SIZE),
        "cases": 0,
        "report": False,
        "shortcut": False,
    }
    mean = actviz.ablate(planted(), folder, mode="mean", out=tmp_path / "mean", **common)
    # By hand: each unit's mean map over the folder at layer 3, then the rest of the model.
    from actviz.models import Preprocessing

    pre = Preprocessing.fitted(input_size=(SIZE, SIZE), in_chans=3)
    paths = sorted(folder.rglob("*.png"))
    x = torch.stack([pre(Image.open(p).convert("RGB")) for p in paths])
    model = planted().eval()
    with torch.inference_mode():
        a = model[:4](x)
        edited = a.clone()
        edited[:, [3, 5]] = a[:, [3, 5]].mean(dim=0, keepdim=True)
        expected = model[4:](edited)
    table = columns(mean.table)
    rel = [p.relative_to(folder).as_posix() for p in paths]
    for i, image in enumerate(rel):
        j = int(np.flatnonzero(table["image"] == image)[0])
        label = int(table["label"][j])
        assert table["logit_after"][j] == pytest.approx(float(expected[i, label]), abs=1e-5)
    first = actviz.ablate(planted(), folder, mode="resample", out=tmp_path / "r1", **common)
    again = actviz.ablate(planted(), folder, mode="resample", out=tmp_path / "r2", **common)
    other = actviz.ablate(planted(), folder, mode="resample", seed=5, out=tmp_path / "r3", **common)
    import json

    donors = json.loads(first.record.read_text())["mode"]["donors"]
    assert sorted(donors) == sorted(rel) and all(d != image for image, d in donors.items())
    with torch.inference_mode():
        edited = a.clone()
        for i, image in enumerate(rel):
            edited[i, [3, 5]] = a[rel.index(donors[image]), [3, 5]]
        expected = model[4:](edited)
    table = columns(first.table)
    for i, image in enumerate(rel):
        j = int(np.flatnonzero(table["image"] == image)[0])
        label = int(table["label"][j])
        assert table["logit_after"][j] == pytest.approx(float(expected[i, label]), abs=1e-5)
    t1, t2, t3 = (columns(r.table) for r in (first, again, other))
    assert all(np.array_equal(t1[k], t2[k]) for k in t1)
    assert not np.array_equal(t1["logit_after"], t3["logit_after"])


def dictionary_file(path: Path, layer: str = "3", model: str = "Sequential") -> Path:
    """A dictionary of 4 features over the planted model's 6 channels; feature 3 never fires
    (its encoder bias is far below zero)."""
    from actviz.dictionary import SparseDictionary, dictionary_bytes

    g = torch.Generator().manual_seed(0)
    w_dec = torch.randn(4, 6, generator=g)
    w_dec /= w_dec.norm(dim=1, keepdim=True)
    sae = SparseDictionary(
        w_enc=w_dec.clone(),
        b_enc=torch.tensor([0.1, 0.0, 0.0, -1e3]),
        w_dec=w_dec,
        b_dec=torch.zeros(6),
        mean=torch.zeros(6),
        scale=1.5,
        k=2,
        config={
            "model": model,
            "model_info": {"source": "module", "name": model},
            "layer": {"key": layer, "module": layer},
            "input_size": [SIZE, SIZE],
        },
    )
    path.write_bytes(dictionary_bytes(sae))
    return path


def test_a_dictionary_feature_that_never_fires_changes_nothing(tmp_path: Path) -> None:
    folder = squares(tmp_path / "in", per=2)
    file = dictionary_file(tmp_path / "sae.safetensors")
    common: dict[str, Any] = {
        "layer": "3",
        "sae": file,
        "input_size": (SIZE, SIZE),
        "cases": 0,
        "report": False,
    }
    unused = actviz.ablate(planted(), folder, features="3", out=tmp_path / "a", **common)
    table = columns(unused.table)
    assert (table["logit_after"] == table["logit_before"]).all()
    assert (table["pred_after"] == table["pred_before"]).all()
    # Feature 0 zeroed: the layer minus its code times its decoder row (the dictionary's
    # reconstruction error passed through), through the rest; the shortcut agrees.
    from actviz.dictionary import load_dictionary
    from actviz.models import Preprocessing

    for shortcut in (True, False):
        used = actviz.ablate(
            planted(),
            folder,
            features="0",
            shortcut=shortcut,
            out=tmp_path / f"u{shortcut}",
            **common,
        )
        sae = load_dictionary(file)
        pre = Preprocessing.fitted(input_size=(SIZE, SIZE), in_chans=3)
        paths = sorted(folder.rglob("*.png"))
        x = torch.stack([pre(Image.open(p).convert("RGB")) for p in paths])
        model = planted().eval()
        with torch.inference_mode():
            a = model[:4](x)
            codes = sae.encode_maps(a)
            edited = a - codes[:, :1] * (sae.scale * sae.w_dec[0])[None, :, None, None]
            expected = model[4:](edited)
        table = columns(used.table)
        assert not np.array_equal(table["logit_after"], table["logit_before"])
        for i, p in enumerate(paths):
            j = int(np.flatnonzero(table["image"] == p.relative_to(folder).as_posix())[0])
            label = int(table["label"][j])
            assert table["logit_after"][j] == pytest.approx(float(expected[i, label]), abs=1e-5)
