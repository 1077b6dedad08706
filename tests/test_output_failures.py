"""The disk fills up or refuses writes part way: a clear error, nothing corrupted."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import make_image

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("err", "fix"),
    [
        (errno.ENOSPC, "free some space or choose another --out"),
        (errno.EROFS, "choose a writable --out"),
        (errno.EACCES, "choose a writable --out"),
    ],
)
def test_write_failure_part_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, fix: str
) -> None:
    photos = tmp_path / "photos"
    for i in range(6):
        make_image(photos / f"{i}.png", seed=i)
    out = tmp_path / "out"
    real_write = Path.write_bytes
    calls = {"n": 0}

    def failing_write(self: Path, data: bytes) -> int:
        if ".png." in self.name:  # the temporary name of a PNG
            calls["n"] += 1
            if calls["n"] > 5:  # let a few grids land first, then fail half-way through one
                real_write(self, bytes(data)[: len(data) // 2])
                raise OSError(err, "simulated failure")
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", failing_write)
    result = CliRunner().invoke(
        app, ["run", "resnet18", str(photos), "-l", "fc", "-w", "none", "-b", "1", "-o", str(out)]
    )
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "simulated failure" in errors[0] and fix in errors[0]
    assert "Traceback" not in result.output
    monkeypatch.setattr(Path, "write_bytes", real_write)
    written = sorted(out.rglob("*.png"))
    assert len(written) == 5  # grids and input views alike: each whole or absent
    for png in written:  # what was written before the failure is whole and readable
        with Image.open(png) as im:
            assert np.asarray(im.convert("RGB")).std() > 0
    assert not [p for p in out.rglob("*") if "actviz-tmp" in p.name]
    assert not (out / "manifest.json").exists()


def test_output_is_a_file_or_unwritable(tmp_path: Path, image_file: Path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("mine")
    result = CliRunner().invoke(app, ["run", "resnet18", str(image_file), "-o", str(a_file)])
    assert result.exit_code == 1 and "is a file" in result.stderr
    assert a_file.read_text() == "mine"
    nested = CliRunner().invoke(
        app, ["run", "resnet18", str(image_file), "-o", str(a_file / "sub")]
    )
    assert nested.exit_code == 1 and "cannot write" in nested.stderr
    assert "Traceback" not in nested.output
