"""Small CLI details: where ``--debug`` may go, and help that describes the command it is on."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from actviz.cli import app, main
from actviz.errors import UnknownModelError

runner = CliRunner()


@pytest.mark.parametrize(
    "argv",
    [["list-layers", "vgg99", "--debug"], ["--debug", "list-layers", "vgg99"]],
)
def test_debug_works_before_or_after_the_command(argv: list[str]) -> None:
    with pytest.raises(UnknownModelError, match="vgg19"):
        main(argv)


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
    from actviz.examples.sheets import LABEL_SIZE, _fit, tile_name
    from actviz.render.legend import text_width

    a = tile_name("/data/photos/a_long_folder_name/red_bell_pepper_rot90.jpg")
    b = tile_name("/data/photos/another_folder/red_bell_pepper_rot90.jpg")
    assert a == "a_long_folder_name/red_bell_pepper_rot90.jpg" and tile_name("x.png") == "x.png"
    short_a, short_b = _fit(a, 96), _fit(b, 96)
    assert short_a != short_b  # identical files in different folders look different
    for short in (short_a, short_b):
        assert "…" in short and short.endswith("90.jpg")
        assert text_width(short, LABEL_SIZE) <= 96
    assert short_a.startswith("a_") and short_b.startswith("an")
