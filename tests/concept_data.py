"""Planted models and coloured-square pictures for the concept commands (label, tcav).

The planted model's first layer is a 1x1 convolution whose channels 0, 1 and 2 detect red,
green and blue pixels (in the raw colours, through ImageNet's normalisation) and whose five
other channels are constants; its class c is the mean of channel c. The pictures are grey noise
with 10 x 10 squares of red, green and blue, each present with a fixed probability, and the
tags and masks that say where.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image

PLANTED = """
import torch
from torch import nn

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def build():
    conv = nn.Conv2d(3, 8, 1)
    with torch.no_grad():
        conv.weight.zero_()
        conv.bias.zero_()
        for c in range(3):
            others = [o for o in range(3) if o != c]
            conv.weight[c, c] = STD[c]
            for o in others:
                conv.weight[c, o] = -STD[o] / 2
            conv.bias[c] = MEAN[c] - sum(MEAN[o] for o in others) / 2 - 0.3
        for u in range(3, 8):
            conv.bias[u] = 0.1 * u
    head = nn.Linear(8, 3)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        for c in range(3):
            head.weight[c, c] = 1.0
    return nn.Sequential(conv, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)
"""
"""A factory file's source: ``build()`` gives the planted model (layer ``1``: its ReLU)."""

COLOURS = {"red": (230, 20, 20), "green": (20, 210, 20), "blue": (20, 20, 230)}
#: Every picture's side; the model's input is 32 x 32 (a resize to 37, a centre crop).
SIDE = 48
SQUARE = 10


def write_factory(folder: Path) -> str:
    """The planted model as ``folder/planted.py:build``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "planted.py").write_text(PLANTED)
    return f"{folder / 'planted.py'}:build"


def write_squares(
    folder: Path,
    count: int,
    *,
    seed: int = 0,
    share: float = 0.4,
    colours: tuple[str, ...] = tuple(COLOURS),
    classes: bool = False,
    single: bool = False,
) -> dict[str, dict[str, tuple[int, int]]]:
    """``count`` pictures in ``folder`` (``imNNN.png``; with ``classes``, each in the subfolder
    of its first colour, or ``none``); with ``single``, one colour at most per picture (``share``
    of them hold none). Returns per picture name the colours it holds and the top-left corner
    of each square."""
    rng = np.random.default_rng(seed)
    held: dict[str, dict[str, tuple[int, int]]] = {}
    for i in range(count):
        pixels = rng.integers(100, 160, size=(SIDE, SIDE, 3)).astype(np.uint8)
        squares: dict[str, tuple[int, int]] = {}
        if single:
            pick = colours[int(rng.integers(len(colours)))]
            chosen = [pick] if rng.random() >= share else []
        else:
            chosen = [c for c in colours if rng.random() < share]
        for name in chosen:
            y, x = (int(v) for v in rng.integers(12, SIDE - 12 - SQUARE, size=2))
            pixels[y : y + SQUARE, x : x + SQUARE] = COLOURS[name]
            squares[name] = (y, x)
        sub = (next(iter(squares), "none") + "/") if classes else ""
        name = f"{sub}im{i:03d}.png"
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path)
        held[name] = squares
    return held


def write_tags(path: Path, held: dict[str, dict[str, tuple[int, int]]]) -> Path:
    """``image,tag`` rows of every square."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "tag"])
        for image, squares in held.items():
            for colour in squares:
                writer.writerow([image, colour])
    return path


def write_masks(folder: Path, held: dict[str, dict[str, tuple[int, int]]]) -> Path:
    """``folder/<colour>/<image>.png``: each square's mask."""
    for image, squares in held.items():
        for colour, (y, x) in squares.items():
            mask = np.zeros((SIDE, SIDE), dtype=np.uint8)
            mask[y : y + SQUARE, x : x + SQUARE] = 255
            path = folder / colour / image
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(mask).save(path)
    return folder
