"""Shared fixtures: a tiny model with known names, generated images, a CLI runner."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from PIL import Image

if TYPE_CHECKING:
    from actviz.statistics import LayerStats

# Each worker of a parallel run (pytest-xdist) computes with one thread, and so do the actviz
# processes its tests start: with torch's default of a thread per core, the workers' OpenMP
# threads spin waiting on each other's cores (on 2 cores the suite took 7:48 so, 5:46 with one
# thread a worker, and 10:45 in one process). Set before torch is first imported.
if "PYTEST_XDIST_WORKER" in os.environ and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # a plugin imported it first
        sys.modules["torch"].set_num_threads(1)

# No test reaches the Hugging Face hub: folders are written by save_pretrained in the test, and
# a lookup that would go online fails at once instead of waiting on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core this process may run on, at most four (each holds its
    own torch and models, 1-3 GB)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(4, cores))


@pytest.fixture
def tiny_net():  # type: ignore[no-untyped-def]
    """Conv -> BN -> in-place ReLU, a ReLU module called twice, a Linear head.

    Names: stem.conv, stem.bn, stem.relu, block.conv, act (called twice), pool, head.
    """
    import torch
    from torch import nn

    class Stem(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.bn(self.conv(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 6, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = Stem()
            self.block = Block()
            self.act = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.head = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.act(self.stem(x) - 0.5)  # first call of `act`
            x = self.act(self.block(x))  # second call
            return self.head(self.pool(x).flatten(1))

    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        # Make bn produce clearly negative values so an in-place ReLU would be visible.
        model.stem.bn.bias.fill_(-1.0)
    return model.eval()


def make_image(path: Path, size: tuple[int, int] = (64, 48), seed: int = 0) -> Path:
    """Write a smooth RGB test picture (gradients plus a bright square) and return its path."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack(
        [xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], axis=-1
    ).astype(np.uint8)
    img[h // 4 : h // 2, w // 4 : w // 2] = 255
    img = np.clip(img + rng.integers(0, 8, img.shape), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path)
    return path


@pytest.fixture
def image_file(tmp_path: Path) -> Path:
    return make_image(tmp_path / "in" / "dog.png")


PhotoName = str | Callable[[int], str]
"""A photo's path in its folder: a format string of ``i`` or a function of ``i``."""


def write_photos(
    folder: Path,
    count: int | Sequence[tuple[int, int]],
    *,
    size: tuple[int, int] = (48, 40),
    name: PhotoName = "p{i}.png",
) -> Path:
    """Write ``count`` pictures of ``make_image`` (or one per ``(width, height)`` of a sequence)
    into ``folder``, picture ``i`` with seed ``i``, and return the folder."""
    sizes = [size] * count if isinstance(count, int) else list(count)
    for i, each in enumerate(sizes):
        relative = name(i) if callable(name) else name.format(i=i)
        make_image(folder / relative, size=each, seed=i)
    return folder


@pytest.fixture(scope="session")
def make_photos(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``make_photos(count or sizes, *, size, name, folder)``: a folder of generated photos
    (:func:`write_photos`), a new one for each call unless ``folder`` names it. Session-scoped,
    so module-scoped fixtures can use it too."""

    def make(
        count: int | Sequence[tuple[int, int]],
        *,
        size: tuple[int, int] = (48, 40),
        name: PhotoName = "p{i}.png",
        folder: Path | None = None,
    ) -> Path:
        root = folder if folder is not None else tmp_path_factory.mktemp("photos")
        return write_photos(root, count, size=size, name=name)

    return make


def layer_stats(
    *,
    mean: float = 0.0,
    std: float = 1.0,
    channels: int = 4,
    per_channel: int = 25,
    count: int | None = None,
    dead: tuple[int, ...] = (),
    nan: int = 0,
    inf: int = 0,
    lo: float | None = None,
    hi: float | None = None,
    spread: float = 2.0,
    tails: float | None = None,
    zero_frac: float = 0.0,
    neg_frac: float = 0.5,
) -> LayerStats:
    """A hand-made :class:`~actviz.statistics.LayerStats`: ``count`` (``channels * per_channel``
    unless given) values of ``mean`` and ``std``, min and max ``spread`` standard deviations
    away (unless ``lo`` / ``hi``), p01 and p99 ``tails`` away (``spread`` unless given), the
    ``dead`` channels by index."""
    from actviz.statistics import LayerStats

    tails = spread if tails is None else tails
    return LayerStats(
        count=channels * per_channel if count is None else count,
        mean=mean,
        std=std,
        min=mean - spread * std if lo is None else lo,
        max=mean + spread * std if hi is None else hi,
        p01=mean - tails * std,
        p99=mean + tails * std,
        zero_frac=zero_frac,
        neg_frac=neg_frac,
        nan=nan,
        inf=inf,
        channels=channels,
        dead_channels=len(dead),
        dead_frac=len(dead) / channels,
        dead_indices=dead,
    )


def run_images(out: Path) -> list[dict[str, Any]]:
    """Every image record of the run in ``out``, in order, read back from its ledger (what
    ``manifest.json`` listed under ``"images"`` before it pointed at the ledger)."""
    import actviz

    return list(actviz.read_images(out))


# A value computed in float32 for another batch (another kernel, another order of the sums)
# moves by a few roundings (2**-23 each) of the magnitudes summed into it, and those are about
# the layer's RMS: 128 roundings of it cover a convolution's accumulation and the statistics'
# own float32 sums with room, and stay far below any difference a wrong result would make.
REBATCH_SCALE = 2.0**-16
# Fractions of a count: an element within that rounding of 0 may land on either side of it.
COUNTED_FRACTIONS = ("zero_frac", "neg_frac")


@contextlib.contextmanager
def default_sigint() -> Iterator[None]:
    """Processes started in the block get SIGINT's default action, as from a terminal. A
    shell's background job (``pytest &``) starts with SIGINT ignored, every child inherits
    that and Python keeps it, so a child sent Ctrl-C there would run on to its end. A Python
    handler, unlike "ignore", is reset to the default when the child execs."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def frozen_mid_run(
    proc: subprocess.Popen[Any], ledger: Path, lines: int, total: int, timeout: float = 120
) -> bool:
    """Wait until a run's ledger has ``lines`` lines, then stop the process where it is
    (SIGSTOP), so that a signal sent next lands mid-run however late this thread was
    scheduled; the caller sends it, then SIGCONT. False, with the process left to end, when
    the run had already written all ``total`` lines or ended (this thread was scheduled too
    late to see it mid-run): the caller starts again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ledger.exists() and ledger.read_bytes().count(b"\n") >= lines:
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGSTOP)
    if not ledger.exists() or ledger.read_bytes().count(b"\n") < total:
        return True  # mid-run (or, past the timeout, still starting: the caller's checks say)
    proc.send_signal(signal.SIGCONT)
    proc.communicate(timeout=120)
    return False


def started_and_frozen(
    start: Callable[[Path], subprocess.Popen[Any]], out: Path, lines: int, total: int
) -> tuple[subprocess.Popen[Any], Path]:
    """A run started by ``start(folder)`` and stopped mid-run (:func:`frozen_mid_run`) once
    its ledger has ``lines`` lines of ``total``; a run that ended first is started again in
    a new folder, three times at most. Returns the stopped process and its folder."""
    from actviz.run.records import RunRecords

    for attempt in range(3):
        folder = out.with_name(f"{out.name}{attempt}")
        proc = start(folder)
        if frozen_mid_run(proc, folder / RunRecords.FILE, lines, total):
            return proc, folder
    pytest.fail("the run ended before it could be stopped mid-run, three times")


def same_up_to_batching(a: Any, b: Any, *, scale: float = 0.0) -> bool:
    """Whether two JSON documents or statistics rows (``stats.json``, Parquet rows) of runs
    that saw the images in batches of different sizes agree within what float32 arithmetic
    lets batch composition change, and exactly elsewhere.

    In a layer's statistics (a dict with ``count``, ``mean`` and ``std``): a counted fraction
    within one element per image (``1 / count``, times ``images`` for a run's pooled layer),
    other floats within ``REBATCH_SCALE`` of the layer's RMS or 1e-6 relative (the files keep 7
    significant digits); a nested dict (across-images percentiles) inherits the layer's RMS.
    Everything else (counts, names, flags, dead channels) must be equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        layer = "count" in a and "mean" in a and "std" in a
        if layer:
            mean, std = (_number(b[k]) for k in ("mean", "std"))
            rms = math.hypot(mean, std)
            scale = rms if math.isfinite(rms) else 0.0
        for key in a:
            if layer and key in COUNTED_FRACTIONS and a[key] is not None and b[key] is not None:
                one = b.get("images", 1) / max(b["count"], 1)
                if not math.isclose(a[key], b[key], rel_tol=0.0, abs_tol=one * (1 + 1e-6)):
                    return False
            elif not same_up_to_batching(a[key], b[key], scale=scale):
                return False
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            same_up_to_batching(x, y, scale=scale) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=max(REBATCH_SCALE * scale, 1e-12))
    return bool(a == b)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan
