"""Models from timm: listing a large one on the meta device, and a run against a minimal script.

- list-layers: ``actviz.api.list_layers("timm/vit_large_patch14_dinov2")`` (a 304M-parameter
  ViT traced at 518 x 518 on the meta device: no memory for weights, nothing computed) against
  what a script does to learn the same shapes: ``timm.create_model`` on the CPU and one hooked
  forward on zeros. Same process, alternating, best of ``--repeat``.
- run: ``actviz run timm/convnext_tiny IMAGE --weights none`` (its default layers, the four
  stage outputs; grids, statistics, manifest and report) against a minimal script doing the
  same capture: import timm, build the model, timm's own transform, hook the four stages, one
  forward, per stage the first 64 channels min-max scaled into one PNG. Each a fresh process
  (interpreter start and imports counted on both sides), in turn; medians of ``--repeat``.

    python benchmarks/bench_sources.py [--image sample_images/cat.jpg] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
LARGE = "vit_large_patch14_dinov2"
CONVNEXT = "convnext_tiny"

MINIMAL = f"""
import sys
from pathlib import Path

import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config

sys.path.insert(0, {str(HERE)!r})
from _common import floor_png

image, out = Path(sys.argv[1]), Path(sys.argv[2])
model = timm.create_model({CONVNEXT!r}, pretrained=False).eval()
transform = create_transform(**resolve_data_config({{}}, model=model))
with Image.open(image) as im:
    x = transform(im.convert("RGB")).unsqueeze(0)
acts = {{}}
for i, stage in enumerate(model.stages):
    stage.register_forward_hook(lambda _m, _i, o, n=f"stages.{{i}}": acts.__setitem__(n, o.clone()))
with torch.inference_mode():
    model(x)
for i, (name, act) in enumerate(acts.items()):
    floor_png(act[0, :64].numpy(), out / f"{{i:02d}}_{{name}}.png")
"""


def listing_seconds(repeat: int) -> tuple[float, float]:
    """Best wall time of actviz's meta listing and of a CPU build plus one hooked forward."""
    import timm
    import torch

    from actviz.api import list_layers

    def ours() -> None:
        listing = list_layers(f"timm/{LARGE}")
        assert listing.input_shape == (1, 3, 518, 518)

    def script() -> None:
        model = timm.create_model(LARGE, pretrained=False).eval()
        shapes: dict[str, object] = {}

        def keep(name: str) -> Callable[..., None]:
            def hook(_m: object, _i: object, output: object) -> None:
                shapes.setdefault(name, getattr(output, "shape", None))

            return hook

        handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if n]
        with torch.inference_mode():
            model(torch.zeros(1, 3, 518, 518))
        for handle in handles:
            handle.remove()

    best = {"actviz": float("inf"), "script": float("inf")}
    for _ in range(repeat):
        for name, call in (("actviz", ours), ("script", script)):
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best["actviz"], best["script"]


def process_seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    ours, script = listing_seconds(args.repeat)
    print(f"list-layers timm/{LARGE} on meta: {ours:.2f} s")
    print(
        f"  script (CPU build + forward):  {script:.2f} s; script / actviz = {script / ours:.1f}x"
    )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        image = args.image
        if image is None:
            import numpy as np
            from PIL import Image

            image = root / "photo.jpg"
            pixels = np.random.default_rng(0).integers(0, 256, (375, 500, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(image)
        minimal = root / "minimal.py"
        minimal.write_text(MINIMAL)
        times: dict[str, list[float]] = {"actviz": [], "minimal": []}
        for i in range(args.repeat):
            out = root / f"a{i}"
            times["actviz"].append(
                process_seconds(
                    [sys.executable, "-m", "actviz", "run", f"timm/{CONVNEXT}", str(image)]
                    + ["--weights", "none", "--out", str(out)]
                )
            )
            out = root / f"m{i}"
            out.mkdir()
            times["minimal"].append(
                process_seconds([sys.executable, str(minimal), str(image), str(out)])
            )
    a, m = statistics.median(times["actviz"]), statistics.median(times["minimal"])
    print(f"run timm/{CONVNEXT} (whole process): actviz {a:.2f} s, minimal script {m:.2f} s")
    print(f"  actviz / minimal = {a / m:.2f}x")


if __name__ == "__main__":
    main()
