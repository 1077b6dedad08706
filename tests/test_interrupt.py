"""Ctrl-C and SIGTERM in the middle of a real folder run, then --resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import default_sigint, run_images, started_and_frozen

pytestmark = pytest.mark.slow

N = 48  # enough that a signal after the third image lands mid-run, however fast a run is
ARGS = ["-l", "layer1.0.conv1,fc", "-w", "none", "-b", "1", "-q"]


def _actviz(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "TORCH_HOME": "/nonexistent-torch-home"}
    with default_sigint():
        return subprocess.Popen(
            [sys.executable, "-m", "actviz", "run", "resnet18", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            **kwargs,  # type: ignore[call-overload]
        )


def _files(root: Path) -> dict[str, np.ndarray]:
    return {
        p.relative_to(root).as_posix(): np.asarray(Image.open(p))
        for p in sorted(root.rglob("[0-9]*_*.png"))
        if not p.relative_to(root).as_posix().startswith("report/")
    }


@pytest.fixture(scope="module")
def photos_and_clean(
    tmp_path_factory: pytest.TempPathFactory, make_photos: Callable[..., Path]
) -> tuple[Path, dict[str, np.ndarray]]:
    """A folder of photos and the grids of one uninterrupted run over it."""
    root = tmp_path_factory.mktemp("interrupt")
    photos = make_photos(N, folder=root / "photos", name=lambda i: f"s{i % 3}/{i:02d}.png")
    clean = root / "clean"
    fresh = _actviz(str(photos), "-o", str(clean), *ARGS)
    _, stderr = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, stderr
    return photos, _files(clean)


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated"),
    ],
)
def test_interrupt_then_resume_equals_one_clean_run(
    tmp_path: Path,
    photos_and_clean: tuple[Path, dict[str, np.ndarray]],
    sig: signal.Signals,
    code: int,
    word: str,
) -> None:
    photos, want = photos_and_clean
    # The ledger's first line holds the run's settings, then one line per finished image.
    proc, out = started_and_frozen(
        lambda out: _actviz(str(photos), "-o", str(out), *ARGS), tmp_path / "out", 1 + 3, 1 + N
    )
    proc.send_signal(sig)  # delivered as the run goes on
    sent = time.monotonic()
    proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=30)
    stopped_in = time.monotonic() - sent
    assert proc.returncode == code, stderr
    assert stopped_in < 5
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: {word} after ") and "--resume" in lines[-1], stderr
    assert "Traceback" not in stderr
    assert not [p for p in out.rglob("*") if "actviz-tmp" in p.name]
    done_before = len(run_images(out))
    assert 3 <= done_before < N

    resumed = _actviz(str(photos), "-o", str(out), "--resume", *ARGS)
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr

    got = _files(out)
    assert list(got) == list(want) and len(want) == 2 * N
    for name, pixels in want.items():
        assert np.array_equal(got[name], pixels), name
