"""Small CLI details: where ``--debug`` may go, and help that describes the command it is on."""

from __future__ import annotations

import inspect
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from actviz.cli import app, main
from actviz.cli.groups import ExecutionFlags, Group, LoadFlags, grouped
from actviz.cli.options import DecodeWorkersOption

runner = CliRunner()


@pytest.mark.parametrize(
    "argv",
    [["list-layers", "vgg99", "--debug"], ["--debug", "list-layers", "vgg99"]],
)
def test_debug_works_before_or_after_the_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2  # the usage error's code: --debug adds the traceback
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "UnknownModelError" in err
    assert "vgg19" in err


def test_without_debug_the_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["list-layers", "vgg99"])
    assert exit_info.value.code == 2  # an unknown name is a usage error
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "diff"])
def test_workers_help_names_no_engine_where_there_is_none(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    line = next(x for x in result.output.splitlines() if "--workers" in x)
    assert "Decoding processes" in line and "engine" not in line
    assert "--engine" not in result.output


def test_top_images_workers_help_keeps_the_engine() -> None:
    result = runner.invoke(app, ["top-images", "--help"], env={"COLUMNS": "200"})
    line = next(x for x in result.output.splitlines() if "--workers" in x)
    assert "--engine ray" in line


def test_tile_labels_keep_the_folder_and_cut_in_the_middle() -> None:
    from actviz.render.legend import text_width
    from actviz.top_images.sheets import LABEL_SIZE, _fit, tile_name

    a = tile_name("/data/photos/a_long_folder_name/red_bell_pepper_rot90.jpg")
    b = tile_name("/data/photos/another_folder/red_bell_pepper_rot90.jpg")
    assert a == "a_long_folder_name/red_bell_pepper_rot90.jpg" and tile_name("x.png") == "x.png"
    short_a, short_b = _fit(a, 96), _fit(b, 96)
    assert short_a != short_b  # identical files in different folders look different
    for short in (short_a, short_b):
        assert "…" in short and short.endswith("90.jpg")
        assert text_width(short, LABEL_SIZE) <= 96
    assert short_a.startswith("a_") and short_b.startswith("an")


def test_a_group_becomes_one_option_per_field_and_one_object() -> None:
    """Typer sees each field of a group as an option; the command gets the group built, with
    the fields it does not offer at their defaults and a replaced field's declaration used.
    (Its annotations are resolved in the module's globals, as a command's are.)"""
    seen: dict[str, object] = {}

    @grouped
    def command(
        name: str,
        *,
        load: LoadFlags,
        execution: Annotated[
            ExecutionFlags,
            Group(without=("engine", "amp"), replace={"workers": DecodeWorkersOption}),
        ],
        quiet: bool = False,
    ) -> None:
        seen.update(name=name, load=load, execution=execution, quiet=quiet)

    params = inspect.signature(command).parameters
    assert list(params)[:3] == ["name", "weights", "device"]
    assert "engine" not in params and "amp" not in params and "load" not in params
    assert params["workers"].annotation is DecodeWorkersOption
    assert list(params)[-1] == "quiet"

    tiny = typer.Typer()
    tiny.command()(command)
    result = CliRunner().invoke(
        tiny, ["resnet18", "-w", "none", "-j", "2", "--input-size", "64,96"]
    )
    assert result.exit_code == 0, result.output
    assert seen["name"] == "resnet18" and seen["quiet"] is False
    load = seen["load"]
    assert isinstance(load, LoadFlags) and load.weights == "none"
    assert load.options().input_size == (64, 96)
    execution = seen["execution"]
    assert isinstance(execution, ExecutionFlags)
    assert execution.options().workers == 2 and execution.options().engine == "local"


def test_a_folder_run_prints_each_images_top_classes_unambiguously(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    from pathlib import Path, PurePosixPath
    from types import SimpleNamespace

    from rich.console import Console

    from actviz.cli import console
    from actviz.results import ImageResult, Prediction

    def image(name: str, labels: list[str]) -> ImageResult:
        predictions = [Prediction(i, label, 0.5 - 0.1 * i) for i, label in enumerate(labels)]
        return ImageResult(Path(name), PurePosixPath(name), predictions=predictions)

    images = [image("a.png", ["crane, bird", "crane, machine"]), image("b.png", ["tench", "x"])]
    result = SimpleNamespace(
        weights=SimpleNamespace(random=False),
        model_info={},
        count=lambda status: 2,
        images=images,
        render={"grids": True},
        grids_written=2,
        files_written=3,
        manifest="out/manifest.json",
        report=None,
        out="out",
    )
    buffer = io.StringIO()
    monkeypatch.setattr(console, "out_console", Console(file=buffer, width=200, soft_wrap=True))
    console.print_run(result)  # type: ignore[arg-type]
    lines = buffer.getvalue().splitlines()
    # Labels that hold commas stay whole: percent first, a bar between classes.
    assert lines[0] == "a.png: 50% crane, bird | 40% crane, machine"
    assert lines[1] == "b.png: 50% tench | 40% x"
