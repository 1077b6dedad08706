"""Shared by the benchmarks: a reproducible folder of real photos, and the floor's drawing."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from PIL import Image

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"


def make_folder(root: Path, count: int, *, seed: int = 0) -> Path:
    """``count`` JPEGs cut from the sample photos at random sizes, in a few subfolders."""
    rng = random.Random(seed)
    photos = []
    for path in sorted(SAMPLES.glob("*.[jp][pn]g")):
        with Image.open(path) as im:
            photos.append(im.convert("RGB"))
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = photo.size
        cw, ch = rng.randint(w // 3, w), rng.randint(h // 3, h)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = photo.crop((x, y, x + cw, y + ch)).resize(
            (rng.randint(200, 640), rng.randint(200, 640))
        )
        target = root / f"set{i % 4}" / f"img{i:04d}.jpg"
        target.parent.mkdir(exist_ok=True)
        crop.save(target, quality=90)
    return root


def floor_png(fmap: np.ndarray, target: Path, *, same_encoder: bool = False) -> None:
    """The least work for a grid: per-channel min-max, tiles by array operations, the viridis
    colormap as the palette of one PNG write at zlib level 1 (Pillow's encoder, what a script
    uses; ``same_encoder``: actviz's, which deflates with ISA-L)."""
    lut = (matplotlib.colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)
    c, h, w = fmap.shape
    lo = fmap.min(axis=(1, 2), keepdims=True)
    span = np.maximum(fmap.max(axis=(1, 2), keepdims=True) - lo, 1e-12)
    levels = ((fmap - lo) / span * 255).astype(np.uint8)
    scale = max(1, -(-32 // max(h, w)))
    levels = levels.repeat(scale, axis=1).repeat(scale, axis=2)
    cols = int(np.ceil(np.sqrt(c)))
    rows = -(-c // cols)
    tile = np.zeros((rows * cols, h * scale + 2, w * scale + 2), np.uint8)
    tile[:c, : h * scale, : w * scale] = levels
    grid = tile.reshape(rows, cols, *tile.shape[1:]).transpose(0, 2, 1, 3)
    if same_encoder:
        from actviz.render.png import encode_png

        pixels = np.ascontiguousarray(grid.reshape(rows * tile.shape[1], -1))
        target.write_bytes(encode_png(pixels, palette=lut, level=1))
        return
    picture = Image.fromarray(grid.reshape(rows * tile.shape[1], -1), mode="L").convert("P")
    picture.putpalette(lut.flatten().tolist())
    picture.save(target, format="PNG", compress_level=1)


def peak_rss_mib(call: str, folder: Path) -> float:
    """Peak resident memory of a fresh process that imports actviz and runs ``call`` (Python
    code that may use ``folder`` and ``tempfile``)."""
    code = (
        "import resource, sys, tempfile, actviz\n"
        f"folder = sys.argv[1]\n{call}\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    # The child's temporary folders go under one removed when it is done.
    with tempfile.TemporaryDirectory(prefix="actviz-bench-rss-") as tmp:
        done = subprocess.run(
            [sys.executable, "-c", code, str(folder)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TMPDIR": tmp},
        )
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def alternated(
    names: Sequence[str],
    timed: Callable[[str, Path], float],
    work: Path,
    repeat: int,
    *,
    warm: Sequence[str] = ("actviz", "minimal"),
    runs: Mapping[str, int] | None = None,
) -> dict[str, list[float]]:
    """Each command, by name, timed ``repeat`` times in turn (a busy machine slows them all
    alike) after one untimed run of each in ``warm`` (the file cache); ``timed(name, out)``
    runs one into a fresh ``out`` folder, removed afterwards. ``runs`` caps a slow one."""
    import shutil

    times: dict[str, list[float]] = {name: [] for name in names}
    for name in warm:
        timed(name, work / f"warm-{name}")
    for i in range(repeat):
        for name in names:
            if runs is not None and i >= runs.get(name, repeat):
                continue
            out = work / f"{name}-{i}"
            times[name].append(timed(name, out))
            shutil.rmtree(out, ignore_errors=True)
    return times
