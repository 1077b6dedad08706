"""Shared by the benchmarks: a reproducible folder of real photos."""

from __future__ import annotations

import random
from pathlib import Path

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
