"""actviz ablate's sweeps against what they replace: resnet18 (random weights), 48 photos.

(a) Every one of 64 channels of ``layer4`` ablated on its own (``--each``: the 64 ablations,
    the ranking and the curve pass), against one plain ``actviz stats`` pass over the same
    images: the linear-readout shortcut makes the 64 ablations one product after the part up
    to ``layer4``, so the target is within 3x (a whole forward per ablation would be ~64x).
(b) The same at ``layer2``, where no identity helps (the rest of the model runs once per
    ablation, the ablations stacked along the batch), against 64 whole forwards of the folder
    with a hook zeroing one channel each (and one unedited), the recipe without the cut.

Same process, same batch size, same decoding; best of ``--repeat`` runs of each side.

    python benchmarks/bench_ablate.py [--images 48] [--repeat 2] [--recipe-units 64]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402
from actviz.models import Preprocessing  # noqa: E402

MODEL = "resnet18"
BATCH = 8
UNITS = "0-63"


def with_ablate(folder: Path, out: Path, layer: str) -> float:
    start = time.perf_counter()
    result = actviz.ablate(
        MODEL,
        folder,
        layer=layer,
        units=UNITS,
        each=True,
        labels="none",
        weights="none",
        out=out,
        batch_size=BATCH,
        cases=0,
        report=False,
    )
    seconds = time.perf_counter() - start
    assert len(result.ablations) == 64 and result.images > 0
    return seconds


def with_stats(folder: Path, out: Path) -> float:
    # What `actviz stats` runs: statistics of its default layers, no grids, no report.
    start = time.perf_counter()
    result = actviz.run(
        MODEL, [folder], out=out, weights="none", batch_size=BATCH, grids=False, report=False
    )
    seconds = time.perf_counter() - start
    assert len(result.images) > 0
    return seconds


def recipe(folder: Path, layer: str, units: int) -> float:
    """One whole pass over the folder per ablation (a forward hook zeroing one channel), plus
    the unedited pass: what ablating without the cut costs. Decoding is done once, outside
    the clock's per-ablation loop but inside the total, as a script would hold the batches."""
    start = time.perf_counter()
    model = torchvision.models.resnet18().eval()
    pre = Preprocessing.fitted(input_size=(224, 224), in_chans=3)
    from PIL import Image

    paths = sorted(folder.rglob("*.jpg"))
    batches = [
        torch.stack([pre(Image.open(p).convert("RGB")) for p in paths[i : i + BATCH]])
        for i in range(0, len(paths), BATCH)
    ]
    module = model.get_submodule(layer)
    with torch.inference_mode():
        for unit in [None, *range(units)]:

            def zero(_m: torch.nn.Module, _a: object, out: torch.Tensor, u: int | None = unit):
                if u is None:
                    return None
                out = out.clone()
                out[:, u] = 0
                return out

            handle = module.register_forward_hook(zero)
            try:
                for x in batches:
                    model(x).argmax(dim=1)
            finally:
                handle.remove()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--recipe-units",
        type=int,
        default=64,
        help="whole passes the recipe times (its figure is scaled to 64 when fewer)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="actviz-bench-ablate-") as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    folder = make_folder(work / "photos", args.images)
    runs: dict[str, list[float]] = {"stats": [], "layer4": [], "layer2": [], "recipe": []}
    for _ in range(args.repeat):
        runs["stats"].append(with_stats(folder, Path(tempfile.mkdtemp(dir=work))))
        runs["layer4"].append(with_ablate(folder, Path(tempfile.mkdtemp(dir=work)), "layer4"))
        runs["layer2"].append(with_ablate(folder, Path(tempfile.mkdtemp(dir=work)), "layer2"))
    scale = (64 + 1) / (args.recipe_units + 1)
    runs["recipe"].append(recipe(folder, "layer2", args.recipe_units) * scale)
    best = {k: min(v) for k, v in runs.items()}
    print(
        f"{MODEL} (random weights), {args.images} images at 224 px, batch {BATCH}, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"    actviz stats                      {best['stats']:7.1f} s")
    print(
        f"    ablate layer4 --units 0-63 --each {best['layer4']:7.1f} s  "
        f"= {best['layer4'] / best['stats']:.2f}x stats  (target <= 3x)"
    )
    print(f"    ablate layer2 --units 0-63 --each {best['layer2']:7.1f} s")
    said = "" if args.recipe_units == 64 else f" (timed {args.recipe_units}, scaled)"
    print(
        f"    64 whole forwards + 1, layer2     {best['recipe']:7.1f} s{said}  "
        f"= {best['recipe'] / best['layer2']:.2f}x ablate's time"
    )
    print(json.dumps({"seconds": runs}))


if __name__ == "__main__":
    main()
