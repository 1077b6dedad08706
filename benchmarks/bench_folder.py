"""A folder of photos through resnet18, every conv layer: actviz against a careful floor.

- (b) throughput: images/s of ``actviz.run`` against a floor that does the least work for the
  same pictures with both cores busy: the same hooks, batched forward passes, grids by array
  operations, palette PNGs encoded in a two-thread pool (by Pillow, as a script would; and
  again with actviz's ISA-L encoder, like for like). Same folder, same process, alternating.
- (c) memory: peak resident memory of a fresh process running actviz over 50 and over 200
  images; a streaming pipeline keeps them within a few percent.

    python benchmarks/bench_folder.py [--images 200] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image
from torchvision import models
from torchvision.transforms._presets import ImageClassification

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import floor_png, make_folder, peak_rss_mib  # noqa: E402

import actviz  # noqa: E402

MODEL = "resnet18"
BATCH = 8


def floor(folder: Path, out: Path, *, same_encoder: bool = False) -> int:
    model = models.get_model(MODEL, weights=None).eval()
    prep = ImageClassification(crop_size=224)
    convs = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    acts: dict[str, torch.Tensor] = {}
    for n, m in convs:
        m.register_forward_hook(lambda _m, _i, o, n=n: acts.__setitem__(n, o.detach().clone()))
    paths = sorted(folder.rglob("*.jpg"))
    with ThreadPoolExecutor(2) as pool:
        pending: list = []
        for start in range(0, len(paths), BATCH):
            chunk = paths[start : start + BATCH]
            x = torch.stack([prep(Image.open(p).convert("RGB")) for p in chunk])
            with torch.inference_mode():
                model(x)
            for f in pending:
                f.result()
            pending = []
            for i, p in enumerate(chunk):
                folder_out = out / p.relative_to(folder).with_suffix("")
                folder_out.mkdir(parents=True, exist_ok=True)
                for k, (name, act) in enumerate(acts.items()):
                    pending.append(
                        pool.submit(
                            floor_png,
                            act[i].numpy(),
                            folder_out / f"{k:02d}_{name}.png",
                            same_encoder=same_encoder,
                        )
                    )
        for f in pending:
            f.result()
    return len(paths)


def floor_same_encoder(folder: Path, out: Path) -> int:
    return floor(folder, out, same_encoder=True)


def with_actviz(folder: Path, out: Path) -> int:
    # Like for like with the floor: grids only.
    result = actviz.run(
        MODEL,
        [folder],
        layers="conv",
        out=out,
        weights="none",
        max_channels=0,
        batch_size=BATCH,
        stats=False,
        report=False,
    )
    return len(result.images)


def with_actviz_defaults(folder: Path, out: Path) -> int:
    # What `actviz run` does by default: grids, statistics and the HTML report.
    result = actviz.run(
        MODEL, [folder], layers="conv", out=out, weights="none", max_channels=0, batch_size=BATCH
    )
    return len(result.images)


def peak_rss(folder: Path) -> float:
    return peak_rss_mib(
        f"actviz.run({MODEL!r}, [folder], layers='conv', out=tempfile.mkdtemp(),"
        f" weights='none', max_channels=0, batch_size={BATCH}, report=False)",
        folder,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="actviz-bench-", ignore_cleanup_errors=True) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    folder = make_folder(work / "photos", args.images)

    contenders = (
        ("actviz", with_actviz),
        ("defaults", with_actviz_defaults),
        ("floor", floor),
        ("floor-isal", floor_same_encoder),
    )
    rates: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for _ in range(args.repeat):
        for name, fn in contenders:
            out = Path(tempfile.mkdtemp(dir=work))
            start = time.perf_counter()
            n = fn(folder, out)
            rates[name].append(n / (time.perf_counter() - start))
            grids = [p for p in out.rglob("[0-9]*_*.png") if "report" not in p.parts]
            assert len(grids) == 20 * args.images, name
    best = {k: max(v) for k, v in rates.items()}
    print(f"(b) {MODEL}, {args.images} images, --layers conv (20 grids each), every channel")
    for name, rate in best.items():
        print(f"    {name:7s} {rate:6.2f} images/s")
    print(f"    actviz / floor = {best['actviz'] / best['floor']:.2f}  (target >= 0.8)")
    print(f"    defaults (+ statistics + report) / floor = {best['defaults'] / best['floor']:.2f}")
    same = best["floor-isal"]
    print(
        f"    against the floor with actviz's PNG encoder: actviz {best['actviz'] / same:.2f},"
        f" defaults {best['defaults'] / same:.2f}"
    )

    if not args.skip_memory:
        small = make_folder(work / "photos50", 50, seed=1)
        rss = {50: peak_rss(small), args.images: peak_rss(folder)}
        print(
            f"(c) peak RSS: 50 images {rss[50]:.0f} MiB, {args.images} images "
            f"{rss[args.images]:.0f} MiB; ratio {rss[args.images] / rss[50]:.3f}  (target <= 1.10)"
        )
    print(json.dumps({"rates": rates}))


if __name__ == "__main__":
    main()
