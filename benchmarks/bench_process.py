"""What a user waits for: ``actviz run`` as a whole process, against two scripts run the same way.

- actviz: ``actviz run resnet34 IMAGE --layers conv --weights none`` with its defaults (grids of
  at most 64 channels, statistics, manifest and report).
- minimal: the least a script can do for the same grids: import torch and torchvision, build the
  model, hook every Conv2d, one forward, per layer the first 64 channels min-max scaled into one
  palette PNG (the floor's drawing in ``_common.floor_png``).
- minimal+gc: the minimal script with actviz's policy for Python's garbage collector
  (``actviz.cli.collector``: paused while torch and torchvision import, what they made frozen
  after, everything frozen before the process ends). actviz / minimal+gc shows what actviz
  costs beyond the floor once the floor does the same.
- recipe: the tutorial way: the same hooks, then an 8 x 8 matplotlib subplot grid per layer.
- import: ``import torch, torchvision`` and nothing else, with the same collector policy: no
  tool that uses PyTorch can start faster, so recipe / import is the most any of them can be
  faster than the recipe here.

Each is a fresh process (interpreter start and the torch import counted on every side), run in
turn so machine noise hits each alike; medians of ``--repeat`` runs are compared.

    python benchmarks/bench_process.py [--image sample_images/cat.jpg] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import alternated  # noqa: E402

_HOOKS = """
import sys
from pathlib import Path

import torch
from PIL import Image
from torchvision import models
from torchvision.transforms._presets import ImageClassification

image, out = Path(sys.argv[1]), Path(sys.argv[2])
model = models.get_model("resnet34", weights=None).eval()
with Image.open(image) as im:
    x = ImageClassification(crop_size=224)(im.convert("RGB")).unsqueeze(0)
acts = {}
for n, m in model.named_modules():
    if isinstance(m, torch.nn.Conv2d):
        m.register_forward_hook(lambda _m, _i, o, n=n: acts.__setitem__(n, o.detach().clone()))
with torch.inference_mode():
    model(x)
"""

MINIMAL = (
    _HOOKS
    + f"""
sys.path.insert(0, {str(HERE)!r})
from _common import floor_png

for i, (name, act) in enumerate(acts.items()):
    floor_png(act[0, :64].numpy(), out / f"{{i:02d}}_{{name}}.png")
"""
)

# The same script with actviz's collector policy: the imports paused, then frozen, and
# everything frozen before the interpreter tears down.
assert "\nimage, out = " in MINIMAL  # where the imports end
MINIMAL_GC = (
    "import gc\ngc.disable()\n"
    + MINIMAL.replace("\nimage, out = ", "\ngc.freeze()\ngc.enable()\nimage, out = ", 1)
    + "gc.freeze()\n"
)

RECIPE = (
    _HOOKS
    + """
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

for i, (name, act) in enumerate(acts.items()):
    fmap = act[0]
    fig, axes = plt.subplots(8, 8, figsize=(12, 12))
    for c, ax in enumerate(axes.flat):
        if c < fmap.shape[0]:
            ax.imshow(fmap[c].numpy(), cmap="viridis")
        ax.axis("off")
    fig.suptitle(name)
    fig.savefig(out / f"{i:02d}_{name}.png")
    plt.close(fig)
"""
)


# The least a process that uses PyTorch does, with the collector policy (the imports paused,
# what they made frozen: nothing is left for teardown to walk).
IMPORT_ONLY = "import gc\ngc.disable()\nimport torch, torchvision\ngc.freeze()\n"


def timed(argv: list[str], out: Path, grids: int = 36) -> float:
    """Seconds one process takes; it must leave ``grids`` layer pictures in ``out``."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    if argv[-1] == "--no-output":
        return seconds
    found = [p for p in out.rglob("[0-9]*_*.png") if "report" not in p.parts]
    assert len(found) == grids, (argv[:3], len(found))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=HERE.parent / "sample_images" / "cat.jpg")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--recipe-repeat", type=int, default=1, help="the recipe takes ~30 s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-process-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    scripts = {
        "minimal": work / "minimal.py",
        "minimal+gc": work / "minimal_gc.py",
        "recipe": work / "recipe.py",
    }
    scripts["minimal"].write_text(MINIMAL)
    scripts["minimal+gc"].write_text(MINIMAL_GC)
    scripts["recipe"].write_text(RECIPE)
    scripts["import"] = work / "import_only.py"
    scripts["import"].write_text(IMPORT_ONLY)
    exe = shutil.which("actviz", path=str(Path(sys.executable).parent)) or "actviz"
    image = str(args.image.resolve())

    def command(name: str, out: Path) -> list[str]:
        if name == "actviz":
            return [exe, "run", "resnet34", image, "-l", "conv", "-w", "none", "-o", str(out)]
        if name == "import":
            return [sys.executable, str(scripts[name]), "--no-output"]
        out.mkdir()
        return [sys.executable, str(scripts[name]), image, str(out)]

    times = alternated(
        ["actviz", "minimal", "minimal+gc", "import", "recipe"],
        lambda name, out: timed(command(name, out), out),
        work,
        args.repeat,
        runs={"recipe": args.recipe_repeat},
    )
    med = {name: statistics.median(t) for name, t in times.items() if t}
    print("resnet34, 1 image, --layers conv (36 grids); whole processes, median seconds")
    for name, seconds in med.items():
        print(f"  {name:10s} {seconds:6.2f} s  ({len(times[name])} runs)")
    print(f"actviz / minimal = {med['actviz'] / med['minimal']:.2f}  (target <= 1.15)")
    print(
        f"actviz / minimal+gc = {med['actviz'] / med['minimal+gc']:.2f}"
        "  (the floor with actviz's collector policy)"
    )
    if "recipe" in med:
        print(f"recipe / actviz = {med['recipe'] / med['actviz']:.1f}x faster  (target >= 10)")
        print(
            f"recipe / import = {med['recipe'] / med['import']:.1f}x: the most a PyTorch"
            " process can be faster than the recipe on this machine"
        )


if __name__ == "__main__":
    main()
