"""One image, resnet34, every conv layer, every channel: actviz against two baselines.

- recipe: the tutorial way: forward hooks on every Conv2d, then per layer an 8 x 8 matplotlib
  subplot grid of the first 64 channels and ``savefig``.
- floor: the least work that gives the same pictures: the same hooks and forward, grids by
  array operations (per-channel min-max, a colormap palette), one Pillow PNG write per layer;
  floor-isal: the same with actviz's PNG encoder (ISA-L's deflate), like for like.

All three start from the model name and the image file and end with PNGs on disk, in this one
process, alternating runs so machine noise hits each alike. Ratios are what count.

    python benchmarks/bench_single_image.py [--image sample_images/cat.jpg] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib
import torch
from PIL import Image
from torchvision import models
from torchvision.transforms._presets import ImageClassification

import actviz

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import floor_png  # noqa: E402

MODEL = "resnet34"


def _setup(image: Path) -> tuple[torch.nn.Module, torch.Tensor, list[tuple[str, torch.nn.Module]]]:
    model = models.get_model(MODEL, weights=None).eval()
    with Image.open(image) as im:
        x = ImageClassification(crop_size=224)(im.convert("RGB")).unsqueeze(0)
    convs = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    return model, x, convs


def _forward_with_hooks(image: Path) -> dict[str, torch.Tensor]:
    model, x, convs = _setup(image)
    acts: dict[str, torch.Tensor] = {}
    handles = [
        m.register_forward_hook(lambda _m, _i, o, n=n: acts.__setitem__(n, o.detach().clone()))
        for n, m in convs
    ]
    with torch.inference_mode():
        model(x)
    for h in handles:
        h.remove()
    return acts


def recipe(image: Path, out: Path) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for i, (name, act) in enumerate(_forward_with_hooks(image).items()):
        fmap = act[0]
        fig, axes = plt.subplots(8, 8, figsize=(12, 12))
        for c, ax in enumerate(axes.flat):
            if c < fmap.shape[0]:
                ax.imshow(fmap[c].numpy(), cmap="viridis")
            ax.axis("off")
        fig.suptitle(name)
        fig.savefig(out / f"{i:02d}_{name}.png")
        plt.close(fig)


def floor(image: Path, out: Path) -> None:
    for i, (name, act) in enumerate(_forward_with_hooks(image).items()):
        floor_png(act[0].numpy(), out / f"{i:02d}_{name}.png")


def floor_same_encoder(image: Path, out: Path) -> None:
    for i, (name, act) in enumerate(_forward_with_hooks(image).items()):
        floor_png(act[0].numpy(), out / f"{i:02d}_{name}.png", same_encoder=True)


def with_actviz(image: Path, out: Path) -> None:
    # Like for like with the floor: grids only.
    actviz.run(
        MODEL,
        [image],
        layers="conv",
        out=out,
        weights="none",
        max_channels=0,
        stats=False,
        report=False,
    )


def with_actviz_defaults(image: Path, out: Path) -> None:
    # What `actviz run` does by default: grids, statistics and the HTML report.
    actviz.run(MODEL, [image], layers="conv", out=out, weights="none", max_channels=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=Path("sample_images/cat.jpg"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-recipe", action="store_true", help="the recipe takes ~1 min")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())

    contenders: dict[str, Callable[[Path, Path], None]] = {
        "actviz": with_actviz,
        "defaults": with_actviz_defaults,
        "floor": floor,
        "floor-isal": floor_same_encoder,
    }
    if not args.skip_recipe:
        contenders["recipe"] = recipe
    times: dict[str, list[float]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as warm:
        with_actviz(args.image, Path(warm))  # warm-up: imports, allocator, caches
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            out = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
            start = time.perf_counter()
            fn(args.image, out)
            times[name].append(time.perf_counter() - start)
            assert len(list(out.rglob("[0-9]*_*.png"))) == 36, name
            shutil.rmtree(out)
            if name == "recipe":
                break  # once is enough to know it is slow
    med = {name: statistics.median(t) for name, t in times.items() if t}
    print(f"{MODEL}, 1 image, --layers conv (36 grids), every channel; median seconds")
    print("  actviz = grids only (--no-report, no statistics); defaults = as `actviz run`")
    for name, seconds in med.items():
        print(f"  {name:8s} {seconds:7.2f} s")
    print(f"actviz / floor = {med['actviz'] / med['floor']:.2f}  (target <= 1.2)")
    print(f"defaults (+ statistics + report) / floor = {med['defaults'] / med['floor']:.2f}")
    same = med["floor-isal"]
    print(
        f"against the floor with actviz's PNG encoder: actviz {med['actviz'] / same:.2f},"
        f" defaults {med['defaults'] / same:.2f}"
    )
    if "recipe" in med:
        print(f"recipe / actviz = {med['recipe'] / med['actviz']:.1f}x faster  (target >= 10)")


if __name__ == "__main__":
    main()
