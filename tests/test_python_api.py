"""The Python API refuses what it cannot do, by name, before anything is written: every
``Literal`` option checked against its choices, one path taken as one input, a folder without
images, an overlay channel no layer has, a module where a name was expected, a folder that
holds no run; and what the command line calls ``--sort`` and ``--channels`` works as keywords."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import actviz
from actviz.cli import app
from actviz.command.options import ExecutionOptions, KeywordError, LoadOptions
from actviz.diff.options import DiffOptions
from actviz.errors import ActvizError, ImageLoadError, ModelError, UsageError
from actviz.optimize.options import OptimizeOptions
from actviz.run.options import DrawOptions, GradientOptions, RunOptions
from actviz.top_images.options import TopImagesOptions

from .conftest import make_image

OPTION_CLASSES = [
    DrawOptions,
    GradientOptions,
    RunOptions,
    ExecutionOptions,
    LoadOptions,
    TopImagesOptions,
    DiffOptions,
    OptimizeOptions,
]


def _literal_fields(cls: type[Any]) -> dict[str, tuple[Any, ...]]:
    """Each field annotated with a Literal (or a Literal or None), resolved as mypy does."""
    from actviz.hooks.recorders import CaptureMode
    from actviz.layouts import Layout
    from actviz.models import Preprocessing
    from actviz.stats import Thresholds

    names = {
        "CaptureMode": CaptureMode,
        "Layout": Layout,
        "Preprocessing": Preprocessing,
        "Thresholds": Thresholds,
        "nn": nn,
        "torch": torch,
    }
    hints = typing.get_type_hints(cls, localns=names)
    found = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if typing.get_origin(hint) is typing.Literal:
            found[f.name] = args
        elif any(typing.get_origin(a) is typing.Literal for a in args):
            found[f.name] = tuple(v for a in args for v in (typing.get_args(a) or (None,)))
    return found


def test_the_literal_options_are_the_ones_expected() -> None:
    """So that the check below cannot pass by finding none."""
    found = {cls.__name__: sorted(_literal_fields(cls)) for cls in OPTION_CLASSES}
    assert found == {
        "DrawOptions": ["layout", "norm", "order", "save_tensors"],
        # cam_method is looked up in the map methods' table (tests/test_map_methods.py).
        "GradientOptions": [],
        "RunOptions": ["capture"],
        "ExecutionOptions": ["engine"],
        "LoadOptions": [],
        "TopImagesOptions": ["score"],
        "DiffOptions": ["metric"],
        "OptimizeOptions": [],
    }


@pytest.mark.parametrize(
    ("cls", "name"),
    [(cls, name) for cls in OPTION_CLASSES for name in _literal_fields(cls)],
    ids=lambda x: x if isinstance(x, str) else x.__name__,
)
def test_every_literal_option_refuses_a_value_outside_its_choices(cls: type, name: str) -> None:
    choices = _literal_fields(cls)[name]
    with pytest.raises(UsageError) as refused:
        cls(**{name: "bogus"})
    message = str(refused.value)
    assert message.startswith(f"{name}='bogus' is not a choice: use ")
    assert all(repr(c) in message for c in choices if c is not None)
    # Every choice is taken.
    for choice in choices:
        built = cls(**{name: choice})
        assert getattr(built, name) == choice


def test_a_refused_keyword_writes_nothing_and_a_valid_one_is_applied(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png", size=(40, 32))
    model = _known_channels()
    small = {"input_size": (32, 32), "device": "cpu", "report": False, "layers": "0"}
    with pytest.raises(UsageError, match="norm='global' is not a choice: use 'channel'"):
        actviz.run(model, str(image), out=tmp_path / "refused", norm="global", **small)
    assert not (tmp_path / "refused").exists()
    result = actviz.run(
        model, str(image), out=tmp_path / "out", norm="channel", sort="max", channels=2, **small
    )
    assert result.render["norm"] == "channel"
    assert result.render["order"] == "max" and result.render["max_channels"] == 2
    (layer,) = result.images[0].layers
    # Each channel is constant at its bias: the two largest maxima are channels 3 and 2.
    assert layer.channels == [3, 2] and layer.channels_shown == 2 and layer.channels_total == 4


def _known_channels() -> nn.Module:
    """A convolution whose channel c is constant at [0, 1, 5, 9][c] on any input."""
    conv = nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        conv.weight.zero_()
        conv.bias.copy_(torch.tensor([0.0, 1.0, 5.0, 9.0]))
    return nn.Sequential(conv, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def test_unknown_and_doubled_keywords_are_usage_errors_and_type_errors(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    with pytest.raises(KeywordError, match="'sortt'; did you mean sort"):
        actviz.run(_known_channels(), image, out=tmp_path / "a", sortt="max")
    with pytest.raises(TypeError, match="'zzz'; help\\(actviz.top_images\\) lists them"):
        actviz.top_images(_known_channels(), image, out=tmp_path / "a", zzz=1)
    with pytest.raises(UsageError, match="sort= and order= are the same option"):
        actviz.run(_known_channels(), image, out=tmp_path / "a", sort="max", order="mean")
    with pytest.raises(UsageError, match="either an options object or keywords"):
        actviz.run(_known_channels(), image, RunOptions(), out=tmp_path / "a")
    assert issubclass(KeywordError, ActvizError) and issubclass(KeywordError, TypeError)
    assert not (tmp_path / "a").exists()


SMALL: dict[str, Any] = {"input_size": (32, 32), "device": "cpu", "report": False}


def test_one_path_is_one_input_for_every_command(tmp_path: Path) -> None:
    image = make_image(tmp_path / "photos" / "cat.png", size=(40, 32))
    model = _known_channels()
    ran = actviz.run(model, str(image), out=tmp_path / "run", layers="0", **SMALL)
    assert [r.path for r in ran.images] == [image] and ran.images[0].status == "ok"
    stats = actviz.run(model, image.parent, out=tmp_path / "stats", grids=False, **SMALL)
    assert [r.path for r in stats.images] == [image]
    found = actviz.top_images(model, str(image.parent), out=tmp_path / "top", k=1, **SMALL)
    assert found.images == 1
    other = _known_channels()
    compared = actviz.diff(
        model, str(image), against_model=other, out=tmp_path / "diff", layers="0", **SMALL
    )
    assert [r.path for r in compared.images] == [image]


@pytest.mark.parametrize("wrong", [3, [torch.zeros(3, 8, 8)]])
def test_inputs_that_are_not_paths_are_refused(tmp_path: Path, wrong: Any) -> None:
    with pytest.raises(UsageError, match="inputs must be"):
        actviz.run(_known_channels(), wrong, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "top_images", "diff"])
def test_a_folder_without_images_is_refused_by_name(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "empty_folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("no picture", encoding="utf-8")
    extra = {"against_model": _known_channels()} if command == "diff" else {}
    with pytest.raises(UsageError) as refused:
        getattr(actviz, command)(_known_channels(), folder, out=tmp_path / "out", **extra)
    message = str(refused.value)
    assert message.startswith(f"no images found in {folder} (looked for ")
    assert "1 other file(s) skipped" in message
    assert not (tmp_path / "out").exists()
    with pytest.raises(ImageLoadError, match="missing: no such file or folder"):
        actviz.run(_known_channels(), tmp_path / "missing", out=tmp_path / "out")


def test_an_overlay_channel_no_layer_has_is_refused_and_one_it_has_is_drawn(
    tmp_path: Path,
) -> None:
    image = make_image(tmp_path / "x.png", size=(40, 32))
    model = _known_channels()
    with pytest.raises(UsageError) as refused:
        actviz.run(model, image, out=tmp_path / "no", layers="0", overlay_channel=4, **SMALL)
    assert str(refused.value) == (
        "--overlay-channel 4: the selected layers have at most 4 channels (0-3); pick one below 4"
    )
    assert not (tmp_path / "no").exists()
    with pytest.raises(UsageError, match="--overlay-channel must be a channel index"):
        DrawOptions(overlay_channel=-1)
    # Without overlay=True: the channel implies it, as on the command line.
    result = actviz.run(model, image, out=tmp_path / "yes", layers="0", overlay_channel=3, **SMALL)
    (layer,) = result.images[0].layers
    assert result.render["overlay"] is True and set(layer.pictures) == {"grid", "overlay"}
    assert (tmp_path / "yes" / layer.pictures["overlay"]).is_file()


def test_the_cli_refuses_an_overlay_channel_past_the_layers_channels(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    out = tmp_path / "out"
    done = CliRunner().invoke(
        app,
        ["run", "resnet18", str(image), "-w", "none", "-o", str(out),
         "-l", "layer4.1.conv2", "--overlay-channel", "9999"],
    )  # fmt: skip
    assert done.exit_code == 2, done.stderr
    assert done.stderr.strip() == (
        "error: --overlay-channel 9999: the selected layers have at most 512 channels "
        "(0-511); pick one below 512"
    )
    assert not out.exists()


def test_list_layers_takes_a_module_and_gives_it_back() -> None:
    model = _known_channels().train()
    listing = actviz.list_layers(model, layers="Conv2d", input_size=(16, 20))
    assert listing.model == "Sequential" and listing.input_shape == (1, 3, 16, 20)
    rows = {row.name: row for row in listing.layers}
    assert [row.name for row in listing.layers] == ["0", "1", "2", "3"]
    assert rows["0"].shape == (1, 4, 16, 20) and rows["0"].selected and rows["0"].params == 112
    assert rows["1"].shape == (1, 4, 1, 1) and rows["3"].shape == (1, 3)
    assert not rows["3"].selected and listing.grids == 1 and listing.selector == "Conv2d"
    assert model.training and all(m.training for m in model.modules())
    with pytest.raises(ModelError, match=r"\(1, 1, 224, 224\).*input_size=\(H, W\), in_chans"):
        actviz.list_layers(model, in_chans=1)
    with pytest.raises(UsageError, match="model name .* or a torch.nn.Module, not int"):
        actviz.list_layers(3)  # type: ignore[arg-type]


def test_read_images_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="missing does not exist; give the output folder"):
        actviz.read_images(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="holds no run's records"):
        actviz.read_images(tmp_path / "plain")
    image = make_image(tmp_path / "x.png", size=(40, 32))
    actviz.run(_known_channels(), image, out=tmp_path / "out", layers="0", **SMALL)
    (record,) = actviz.read_images(str(tmp_path / "out"))
    assert record["path"] == str(image) and record["status"] == "ok"


def test_watch_refuses_a_name_and_a_probe_that_is_not_a_batch(tmp_path: Path) -> None:
    from actviz.errors import UsageError

    with pytest.raises(UsageError, match=r"not str; build it first: model = actviz\.load_model"):
        actviz.watch("resnet18", out=tmp_path / "w")  # type: ignore[arg-type]
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with pytest.raises(UsageError, match=r"not \(3, 8, 8\); add the batch dimension"):
        actviz.watch(model, out=tmp_path / "w", probe=torch.zeros(3, 8, 8))
    # The parameters, a name or the model where the optimizer goes; a probe of raw bytes.
    for wrong in (model.parameters(), "sgd", model):
        with pytest.raises(UsageError, match=r"optimizer is a torch\.optim\.Optimizer, not"):
            actviz.watch(model, wrong, out=tmp_path / "w")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"not torch\.uint8; preprocess it first"):
        actviz.watch(model, out=tmp_path / "w", probe=torch.zeros(1, 3, 8, 8, dtype=torch.uint8))
    with pytest.raises(UsageError, match=r"every must be a whole number"):
        actviz.watch(model, out=tmp_path / "w", every=True)
    assert not (tmp_path / "w").exists()  # refused before anything is written
    # w.step() outside the block says where it belongs; a probe the model cannot take is
    # named as the probe, not as a convolution's error deep in torch.
    w = actviz.watch(model, out=tmp_path / "w")
    with pytest.raises(UsageError, match=r"call it inside `with actviz\.watch"):
        w.step(loss=1.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    bad = torch.zeros(2, 5, 8, 8)
    with (
        pytest.raises(UsageError, match=r"probe of shape \(2, 5, 8, 8\) cannot run through"),
        actviz.watch(model, optimizer, out=tmp_path / "p", probe=bad, probe_every=1) as w,
    ):
        model(torch.zeros(2, 3, 8, 8)).sum().backward()
        optimizer.step()
        w.step(loss=1.0)
