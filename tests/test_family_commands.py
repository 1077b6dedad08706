"""Every command on every family: it handles the family's models or refuses them in one line
(exit 2), before any work and without leaving an output folder behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from actviz.models.families import DETECTION, OPTICAL_FLOW, QUANTIZED, VIDEO
from tests.conftest import make_image
from tests.test_optical_flow import TINY_FLOW
from tests.test_quantized import _FACTORY as QUANTIZED_NET
from tests.test_video import NET as VIDEO_NET
from tests.test_video import write_gif

#: (family, command) pairs that make no sense, each refused by the family's row.
REFUSED = [
    (VIDEO, "diff"),
    (VIDEO, "sae"),
    (VIDEO, "tcav"),
    (VIDEO, "cam-eval"),
    (OPTICAL_FLOW, "diff"),
    (OPTICAL_FLOW, "sae"),
    (OPTICAL_FLOW, "tcav"),
    (OPTICAL_FLOW, "cam-eval"),
    (DETECTION, "cam-eval"),
    (QUANTIZED, "cam-eval"),
]


@pytest.mark.parametrize(("family", "command"), REFUSED, ids=lambda v: getattr(v, "key", v))
def test_the_familys_row_refuses_the_command(family: object, command: str) -> None:
    why = family.refusal(command)  # type: ignore[attr-defined]
    assert why is not None and "\n" not in why
    assert "backbone" not in why  # a detector is not "a backbone without a classifier"


def _factory(tmp_path: Path, source: str, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return f"{path}:build"


@pytest.mark.parametrize(
    ("net", "command", "says"),
    [
        ("video", "diff", "diff does not take"),
        ("video", "sae", "a video model takes clips"),
        ("video", "cam-eval", "a video model takes clips: draw their maps with actviz run --cam"),
        ("flow", "diff", "a flow model takes pairs"),
        ("flow", "sae", "a flow model takes pairs"),
        ("quantized", "cam-eval", "use the float model"),
    ],
)
def test_a_command_refuses_a_family_in_one_line_before_any_work(
    tmp_path: Path, net: str, command: str, says: str
) -> None:
    source = {"video": VIDEO_NET, "flow": TINY_FLOW, "quantized": QUANTIZED_NET}[net]
    model = _factory(tmp_path, source, f"{net}net")
    if net == "video":
        inputs = [write_gif(tmp_path / "in" / f"{s}.gif", frames=4) for s in "ab"]
    else:
        inputs = [make_image(tmp_path / "in" / f"{s}.png", size=(40, 32)) for s in "ab"]
    out = tmp_path / "out"
    argv = [command, model, *map(str, inputs), "-o", str(out), "-w", "none"]
    result = CliRunner().invoke(app, [*argv, "--input-size", "32,32"])
    assert result.exit_code == 2, result.output
    assert f"{command} does not take" in result.output and says in result.output
    assert "Traceback" not in result.output and "--input-size" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()
