"""The one resume check of the command kit: settings a folder was written with against this
run's; any difference is one usage error (exit 2) naming what changed, and nothing is written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from actviz.command.resume import check_settings, differences
from actviz.errors import ExitCode, OutputError, SettingsChanged, UsageError

EARLIER = {"model": "resnet18", "k": 9, "draw": {"norm": "channel", "cmap": None}, "seeds": [0]}


def test_the_same_settings_pass_as_json_gives_them_back(tmp_path: Path) -> None:
    # Tuples come back from JSON as lists, paths as text: the same settings.
    check_settings(tmp_path, EARLIER, {**EARLIER, "seeds": (0,)})
    check_settings(tmp_path, {"x": "a"}, {"x": Path("a")})
    check_settings(tmp_path, {"v": math.nan}, {"v": math.nan})  # NaN equals itself here


def test_a_change_is_named_with_both_values_exit_2_and_nothing_written(tmp_path: Path) -> None:
    (tmp_path / "kept.json").write_text("{}")
    now = {**EARLIER, "k": 5, "draw": {"norm": "global", "cmap": None}, "target": 3}
    with pytest.raises(SettingsChanged) as info:
        check_settings(tmp_path, EARLIER, now)
    assert info.value.exit_code == ExitCode.USAGE
    assert isinstance(info.value, UsageError) and isinstance(info.value, OutputError)
    assert str(info.value) == (
        f"resume=True: {tmp_path} was written with k=9 (now 5), draw.norm=channel (now "
        "global) and target not set (now 3); use overwrite=True or another out"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["kept.json"]


def test_settings_that_are_not_a_mapping_count_as_none() -> None:
    assert differences({}, {"k": 2}) == "k not set (now 2)"
    with pytest.raises(SettingsChanged, match="k not set"):
        check_settings(Path("out"), None, {"k": 2})


def test_run_refuses_a_resume_with_other_settings_through_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from actviz.cli import app
    from tests.conftest import make_image
    from tests.test_cam_eval_cli import TINY_CNN

    factory = tmp_path / "net.py"
    factory.write_text(TINY_CNN)
    make_image(tmp_path / "in" / "a.png", size=(40, 32))
    out = tmp_path / "out"
    base = [
        "run",
        f"{factory}:build",
        str(tmp_path / "in"),
        "--input-size",
        "32,32",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(app, [*base, "-w", "none", "--no-report"])
    assert result.exit_code == 0, result.output
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    result = CliRunner().invoke(
        app, [*base, "-w", "none", "--no-report", "--max-channels", "4", "--resume"]
    )
    assert result.exit_code == 2, result.output
    assert f"--resume: {out} was written with draw.max_channels=64 (now 4);" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
