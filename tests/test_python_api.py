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
from actviz.errors import ActvizError, ImageLoadError, LayerSelectionError, ModelError, UsageError
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
    from actviz.statistics import Thresholds

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


def test_stats_is_a_run_without_pictures_with_the_command_line_s_keywords(tmp_path: Path) -> None:
    image = make_image(tmp_path / "photos" / "cat.png", size=(40, 32))
    model = _known_channels()
    small = {"input_size": (32, 32), "device": "cpu", "layers": "0"}
    with pytest.raises(
        KeywordError, match="draws no picture and takes no gradient: drop cam, norm"
    ):
        actviz.stats(model, image, out=tmp_path / "refused", cam=True, norm="layer", **small)
    with pytest.raises(KeywordError, match="'layer'; did you mean layers"):
        actviz.stats(model, image, out=tmp_path / "refused", layer="0")
    assert not (tmp_path / "refused").exists()
    checked = actviz.stats(model, image.parent, out=tmp_path / "stats", batch_size=2, **small)
    assert [r.path for r in checked.images] == [image] and checked.counts.grids == 0
    assert checked.report is None and (tmp_path / "stats" / "stats.json").is_file()
    assert not list((tmp_path / "stats").rglob("*.png"))
    (layer,) = checked.stats["run"]["layers"]
    assert (layer["name"], layer["channels"]) == ("0", 4)
    # Each channel is constant at its bias, [0, 1, 5, 9]: their mean over the layer is 3.75.
    assert layer["mean"] == pytest.approx(3.75)
    # The same as the command line's stats, and as a run's options with the pictures set aside.
    again = actviz.stats(model, image, RunOptions(layers="0", out=tmp_path / "again", report=False))
    assert again.counts.grids == 0 and again.stats["run"]["layers"][0]["mean"] == layer["mean"]


@pytest.mark.parametrize(
    ("command", "result"),
    [
        ("run", "RunResult"),
        ("stats", "RunResult"),
        ("top_images", "TopImagesResult"),
        ("diff", "DiffResult"),
        ("cam_eval", "CamEvalResult"),
        ("attribute", "AttributeResult"),
        ("optimize", "OptimizeResult"),
        ("sae", "SaeResult"),
    ],
)
def test_every_command_is_a_function_of_actviz_typed_with_its_result(
    command: str, result: str
) -> None:
    import importlib
    import inspect

    first = getattr(actviz, command)
    importlib.import_module(f"actviz.{command}")  # binds actviz.<command> to its package
    package = getattr(actviz, command)
    assert callable(package) and callable(first)
    for function in (first, package):
        signature = inspect.signature(function)
        assert signature.return_annotation == result
        assert "model" in signature.parameters and "reporter" in signature.parameters


def test_optimize_is_callable_as_actviz_optimize(tmp_path: Path) -> None:
    import actviz.optimize

    made = actviz.optimize(
        _known_channels(), layers="0", channels="2-3", steps=2, size=16, out=tmp_path / "opt"
    )
    assert [c.channel for c in made.layers[0].channels] == [2, 3] and made.json.is_file()


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
        "overlay_channel=4: the selected layers have at most 4 channels (0-3); pick one below 4"
    )
    assert not (tmp_path / "no").exists()
    with pytest.raises(UsageError, match="overlay_channel must be a channel index"):
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


class _Sequence(nn.Module):
    """Not an image model: a vector, a sequence and a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(10, 8)
        self.lstm = nn.LSTM(8, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        y = self.head(out[:, -1])
        return y if scale is None else y * scale


def test_list_layers_takes_an_example_input_for_a_module_that_takes_no_images() -> None:
    model = _Sequence()
    with pytest.raises(ModelError) as refused:
        actviz.list_layers(model)
    message = str(refused.value)
    assert "(1, 3, 224, 224)" in message and "input_data=x" in message
    x = torch.zeros(2, 5, 10)
    for data in (x, (x,), {"x": x, "scale": torch.ones(1)}):
        listing = actviz.list_layers(model, input_data=data, layers="lstm")
        rows = {row.name: row for row in listing.layers}
        assert listing.input_shape == (2, 5, 10)
        assert rows["embed"].shape == (2, 5, 8) and rows["head"].shape == (2, 2)
        assert rows["lstm"].selected and rows["lstm"].calls == 1
    with pytest.raises(ModelError, match=r"cannot run _Sequence on input_data \(\(2, 5, 3\)\)"):
        actviz.list_layers(model, input_data=(torch.zeros(2, 5, 3),))
    with pytest.raises(UsageError, match="input_data is the input of a module object"):
        actviz.list_layers("resnet18", input_data=x)


class _Clip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(1, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_a_video_modules_listing_names_the_clip_it_was_fed() -> None:
    with pytest.raises(ModelError) as refused:
        actviz.list_layers(_Clip())
    assert "zero input of shape (1, 3, 16, 224, 224)" in str(refused.value)
    listing = actviz.list_layers(_Clip(), in_chans=1, input_size=(32, 32))
    assert listing.input_shape == (1, 1, 16, 32, 32)
    assert {row.name: row.shape for row in listing.layers}["conv"] == (1, 4, 14, 30, 30)


def test_a_module_objects_selection_errors_point_to_python(tmp_path: Path) -> None:
    with pytest.raises(LayerSelectionError) as bare:
        actviz.list_layers(nn.Conv2d(3, 4, 3), layers="conv")
    message = str(bare.value)
    assert message.startswith("Conv2d has no submodules") and "nn.Sequential(model)" in message
    assert "actviz list-layers" not in message
    image = make_image(tmp_path / "x.png")
    with pytest.raises(LayerSelectionError) as typo:
        actviz.run(_known_channels(), image, out=tmp_path / "o", layers="nosuch", **SMALL)
    assert "run actviz.list_layers(model) to see names and types" in str(typo.value)
    assert "actviz list-layers Sequential" not in str(typo.value)
    with pytest.raises(LayerSelectionError, match="run `actviz list-layers resnet18`"):
        actviz.list_layers("resnet18", layers="nosuch")
    assert not (tmp_path / "o").exists()


def test_a_dict_of_tensors_is_not_read_as_paths(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as refused:
        actviz.run(_known_channels(), {"x": torch.zeros(1, 3, 8, 8)}, out=tmp_path / "o")
    message = str(refused.value)
    assert "not a dict of 'x'" in message and "actviz.capture" in message
    assert "cannot read image" not in message and not (tmp_path / "o").exists()


def test_the_models_command_is_documented_as_listing_every_family() -> None:
    text = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("### `actviz models")[1].split("<!-- generated: models -->")[0]
    assert "classification and segmentation model names" not in section
    assert "all 121" in section and "every one of which `run`" in section


def test_a_negative_channel_count_is_refused(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    for keyword in ("channels", "max_channels"):
        with pytest.raises(UsageError) as refused:
            actviz.run(_known_channels(), image, out=tmp_path / "o", **{keyword: -1}, **SMALL)
        assert str(refused.value) == (
            "channels must be 0 (every channel) or a number of channels per grid, not -1"
        )
    assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError, match="channels must be 0"):
        DrawOptions(max_channels=-1)


def test_errors_name_options_as_the_caller_spells_them(tmp_path: Path) -> None:
    """One message, written with the command line's flags: a Python caller reads its
    keywords, the command line its flags; a command line quoted in backticks stays one."""
    from actviz.errors import python_spelling

    image = make_image(tmp_path / "x.png")
    with pytest.raises(UsageError) as refused:
        actviz.run(_known_channels(), image, out=tmp_path / "o", pca_mask=True, **SMALL)
    assert str(refused.value) == "pca_mask=True needs pca=True"
    cli = CliRunner().invoke(
        app, ["run", "resnet18", str(image), "-w", "none", "--pca-mask", "-o", str(tmp_path / "c")]
    )
    assert cli.exit_code == 2 and cli.stderr.strip() == "error: --pca-mask needs --view pca"
    assert python_spelling(
        "--k 8 must be below --features 4; pass --device cpu, --input-size H,W, --no-pages or "
        "--weights none; --layers names one; run `actviz sae --resume`"
    ) == (
        "k=8 must be below features=4; pass device='cpu', input_size=(H, W), pages=False or "
        "weights='none'; layers names one; run `actviz sae --resume`"
    )
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path: Path) -> None:
    image = make_image(tmp_path / "x.png")
    argv = ["run", "resnet18", str(image), "-w", "none", "--pca-mask", "-o", str(tmp_path / "o")]
    for debug in ([], ["--debug"]):
        done = CliRunner().invoke(app, [*debug, *argv])
        assert done.exit_code == 2, done.output
        assert done.stderr.rstrip().endswith("error: --pca-mask needs --view pca")
        assert ("Traceback (most recent call last)" in done.stderr) == bool(debug)
    assert not (tmp_path / "o").exists()


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
