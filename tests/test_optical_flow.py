"""Optical-flow models: image pairs, every iteration's flow, the pair encoder as two frames."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.io.video import discover_pairs
from actviz.models.clips import pair_preprocessing
from actviz.render.optical_flow import optical_flow_colours, render_optical_flow
from tests.conftest import make_image, run_images


def textured_pair(folder: Path, size: tuple[int, int], shift: int = 3) -> tuple[Path, Path]:
    """Two pictures of one smooth texture, the second moved ``shift`` pixels right."""
    rng = np.random.default_rng(0)
    width, height = size
    small = Image.fromarray(rng.integers(0, 255, (height // 4, width // 4, 3), dtype=np.uint8))
    base = np.asarray(small.resize((width, height), Image.Resampling.BICUBIC))
    folder.mkdir(parents=True, exist_ok=True)
    first, second = folder / "f1.png", folder / "f2.png"
    Image.fromarray(base).save(first)
    Image.fromarray(np.roll(base, shift, axis=1)).save(second)
    return first, second


def test_pairs_are_consecutive_pictures_of_the_inputs(tmp_path: Path) -> None:
    a, b, c = (make_image(tmp_path / f"{n}.png", (20, 16)) for n in "abc")
    for i in range(3):
        make_image(tmp_path / "frames" / f"{i}.png", (20, 16), seed=i)
    pairs, partners = discover_pairs([a, b, c, tmp_path / "frames"])
    firsts = [p.path.name for p in pairs.images]
    assert firsts == ["a.png", "b.png", "0.png", "1.png"]
    assert partners[str(a)] == str(b) and partners[str(b)] == str(c)
    assert partners[str(tmp_path / "frames" / "1.png")] == str(tmp_path / "frames" / "2.png")


def test_sizes_become_multiples_of_8_of_at_least_128() -> None:
    prep = pair_preprocessing()
    assert prep.pair_size((130, 100)) == (128, 160)  # (height, width)
    assert prep.pair_size((300, 200)) == (200, 296)
    assert pair_preprocessing((130, 101)).pair_size((999, 999)) == (128, 96)


def test_each_iteration_is_drawn_on_one_scale() -> None:
    flows = np.zeros((3, 2, 8, 8), dtype=np.float32)
    flows[:, 0] = np.array([1.0, 2.0, 4.0], np.float32)[:, None, None]  # rightwards, growing
    colours = optical_flow_colours(flows)
    saturation = [int(c[0, 0].max()) - int(c[0, 0].min()) for c in colours]
    assert saturation == sorted(saturation) and saturation[0] < saturation[-1]
    picture = render_optical_flow(flows, title="t", columns=4, max_side=64)
    assert picture.dtype == np.uint8 and picture.ndim == 3
    for colour in colours:  # every iteration's tile is in the picture, as flow_to_image drew it
        hits = np.all(picture == colour[0, 0], axis=-1)
        assert hits.sum() >= 64


@pytest.mark.slow
def test_the_last_flow_equals_the_models_and_the_encoder_shows_both_frames(tmp_path: Path) -> None:
    import torch
    from torchvision.models.optical_flow import Raft_Small_Weights

    from actviz.models import load_model

    first, second = textured_pair(tmp_path / "in", (136, 128))
    out = tmp_path / "out"
    args = ["-w", "none", "--flow-updates", "3", "--save-tensors", "--no-report", "-q"]
    layers = ["-l", "feature_encoder,update_block"]
    result = CliRunner().invoke(
        app, ["run", "raft_small", str(first), str(second), "-o", str(out), *layers, *args]
    )
    assert result.exit_code == 0, result.output
    record = run_images(out)[0]
    names = [layer["name"] for layer in record["layers"]]
    assert names[0] == "feature_encoder"
    assert [n for n in names if n.startswith("update_block:")] == [
        "update_block:2[0]",
        "update_block:2[1]",
        "update_block:3[0]",
        "update_block:3[1]",
    ]
    assert record["pictures"] == {"optical_flow": "f1/optical_flow.png"}
    flow_png = Image.open(out / "f1" / "optical_flow.png")
    assert flow_png.mode == "RGB" and flow_png.width > 3 * 136  # pair, key, iterations
    # The run's count of files names every file the pair's folder holds, optical_flow.png included.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"]["all"] == len(list((out / "f1").iterdir()))
    saved = np.load(out / "f1" / "optical_flow.npy")

    model = load_model("raft_small", weights="none").module
    raw = [
        torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)
        for p in (first, second)
    ]
    img1, img2 = Raft_Small_Weights.DEFAULT.transforms()(raw[0][None], raw[1][None])
    features: list[torch.Tensor] = []
    handle = model.feature_encoder.register_forward_hook(
        lambda _m, _a, output: features.append(output.detach().clone())
    )
    with torch.inference_mode():
        flows = model(img1, img2, num_flow_updates=3)
    handle.remove()
    assert saved.shape == (3, 2, 128, 136)
    np.testing.assert_allclose(saved[-1], flows[-1][0].numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(saved[0], flows[0][0].numpy(), atol=1e-4, rtol=1e-4)

    encoder = next(layer for layer in record["layers"] if layer["name"] == "feature_encoder")
    pair = np.load(out / encoder["tensor"])  # (C, 2, h, w): frame 1, frame 2
    assert encoder["layout"] == "ncthw" and "frame 1 and frame 2" in encoder["note"]
    np.testing.assert_allclose(pair[:, 0], features[0][0].numpy(), atol=1e-5)
    np.testing.assert_allclose(pair[:, 1], features[0][1].numpy(), atol=1e-5)


@pytest.mark.slow
def test_sizes_not_divisible_by_8_run(tmp_path: Path) -> None:
    first, second = textured_pair(tmp_path / "in", (130, 100))
    out = tmp_path / "out"
    args = ["-w", "none", "--flow-updates", "2", "-l", "update_block", "--no-report", "-q"]
    result = CliRunner().invoke(
        app, ["run", "raft_small", str(first), str(second), "-o", str(out), "--save-tensors", *args]
    )
    assert result.exit_code == 0, result.output
    assert np.load(out / "f1" / "optical_flow.npy").shape == (2, 2, 128, 160)


def test_one_image_to_a_flow_model_says_what_to_pass(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    result = CliRunner().invoke(
        app, ["run", "raft_small", str(image), "-w", "none", "-o", str(tmp_path / "o"), "-q"]
    )
    assert result.exit_code == 2
    assert "takes pairs of images: pass two images (IMAGE1 IMAGE2)" in result.output
    assert not (tmp_path / "o").exists()


def test_gradients_of_a_flow_model_are_refused(tmp_path: Path) -> None:
    first, second = textured_pair(tmp_path / "in", (128, 128))
    result = CliRunner().invoke(
        app,
        [
            "run",
            "raft_small",
            str(first),
            str(second),
            "-w",
            "none",
            "--cam",
            "-o",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2
    assert "--cam does not apply to raft_small: a flow model has no class scores" in result.output


TINY_FLOW = '''
import torch
from torch import nn
from torch.nn import functional as F


class TinyFlow(nn.Module):
    """A flow-like model: one encoder over both images in one batch, an update per step."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv2d(3, 4, 3, stride=8, padding=1)
        self.update = nn.Conv2d(10, 2, 3, padding=1)

    def forward(self, image1, image2, num_flow_updates=3):
        first, second = self.encoder(torch.cat([image1, image2])).chunk(2)
        flow = first.new_zeros((first.shape[0], 2, *first.shape[-2:]))
        flows = []
        for _ in range(num_flow_updates):
            flow = flow + self.update(torch.cat([first, second, flow], 1))
            flows.append(8 * F.interpolate(flow, size=image1.shape[-2:], mode="bilinear"))
        return flows


def build():
    model = TinyFlow()
    model.actviz_family = "optical_flow"
    return model
'''


def test_a_users_own_flow_model_takes_pairs(tmp_path: Path) -> None:
    import importlib.util

    import torch

    import actviz

    net = tmp_path / "tinyflow.py"
    net.write_text(TINY_FLOW)
    first, second = textured_pair(tmp_path / "in", (136, 128))
    out = tmp_path / "out"
    argv = ["run", f"{net}:build", str(first), str(second), "-o", str(out), "-w", "none"]
    result = CliRunner().invoke(app, [*argv, "--save-tensors", "--no-report"])
    assert result.exit_code == 0, result.output
    record = run_images(out)[0]
    assert record["pictures"] == {"optical_flow": "f1/optical_flow.png"}
    names = [layer["name"] for layer in record["layers"]]
    assert "encoder" in names and {"update:2", "update:3"} <= set(names)
    encoder = next(layer for layer in record["layers"] if layer["name"] == "encoder")
    assert encoder["shape"] == [1, 4, 2, 16, 17] and "frame 1 and frame 2" in encoder["note"]
    assert encoder["layout"] == "ncthw" and encoder["file"]  # drawn as its two frames
    assert "not drawn" not in result.stderr
    # The summary counts pairs, not images.
    assert "1 done" in result.stderr and "pairs/s" in result.stderr
    assert "images/s" not in result.stderr and "for 1 pair(s)" in result.stdout

    # The flows equal the model's own on the pair in [-1, 1] (the factory builds under the
    # run's seed).
    spec = importlib.util.spec_from_file_location("tinyflow_copy", net)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from actviz.models.weights import RANDOM_SEED

    torch.manual_seed(RANDOM_SEED)
    model = module.build().eval()
    pair = [
        torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)[None] / 255.0
        for p in (first, second)
    ]
    with torch.inference_mode():
        flows = model(pair[0] * 2 - 1, pair[1] * 2 - 1)
    saved = np.load(out / "f1" / "optical_flow.npy")
    assert saved.shape == (3, 2, 128, 136)
    np.testing.assert_allclose(saved[-1], flows[-1][0].numpy(), atol=1e-5, rtol=1e-4)

    # The same model as an object, with fewer iterations for this run: given back as it came.
    again = actviz.run(
        model, [first, second], out=tmp_path / "o2", flow_updates=2, save_tensors="npy",
        report=False,
    )  # fmt: skip
    assert np.load(again.out / "f1" / "optical_flow.npy").shape == (2, 2, 128, 136)
    assert not hasattr(model, "_actviz_flow_updates")
    with torch.inference_mode():
        assert len(model(pair[0], pair[1])) == 3
