"""A detector as a whole process: ``actviz run fasterrcnn_resnet50_fpn IMAGE`` against the least
a hand-written hook script does for the same pictures, each a fresh process.

- actviz: ``actviz run fasterrcnn_resnet50_fpn IMAGE --weights none`` with its defaults: the
  backbone's 4 stages, the 5 FPN levels and the RPN's objectness at 5 levels (14 grids of at
  most 64 channels, the padding cropped off), ``detections.png``, statistics, manifest and
  report.
- minimal: import torch and torchvision, build the model, hook the same modules, one forward
  on the image in 0..1 (the model resizes and pads it itself), per capture the first 64
  channels min-max scaled into one palette PNG (``_common.floor_png``), and the boxes drawn
  with ``torchvision.utils.draw_bounding_boxes``.

Run in turn so machine noise hits each alike; medians of ``--repeat`` runs are compared.

    python benchmarks/bench_detection.py [--image sample_images/cat.jpg] [--repeat 3]
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

MINIMAL = f"""
import sys
from pathlib import Path

import torch
from PIL import Image
from torchvision import models
from torchvision.transforms.functional import pil_to_tensor
from torchvision.utils import draw_bounding_boxes

sys.path.insert(0, {str(HERE)!r})
from _common import floor_png

image, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
model = models.get_model(
    "fasterrcnn_resnet50_fpn", weights=None, weights_backbone=None
).eval()
with Image.open(image) as im:
    x = pil_to_tensor(im.convert("RGB"))
acts = {{}}


def keep(name):
    def hook(_m, _i, out):
        items = out.items() if isinstance(out, dict) else [("", out)]
        for key, value in items:
            key = f"{{name}}[{{key}}]" if key else name
            while key in acts:
                key += "'"
            acts[key] = value.detach().clone()

    return hook


modules = dict(model.named_modules())
for name in ["backbone.body.layer1", "backbone.body.layer2", "backbone.body.layer3",
             "backbone.body.layer4", "backbone.fpn", "rpn.head.cls_logits"]:
    modules[name].register_forward_hook(keep(name))
with torch.inference_mode():
    (found,) = model([x.float() / 255])
for i, (name, act) in enumerate(acts.items()):
    floor_png(act[0, :64].numpy(), out / f"{{i:02d}}_{{name}}.png")
keep_ = found["scores"] >= 0.5
boxes = draw_bounding_boxes(x, found["boxes"][keep_], [str(int(v)) for v in found["labels"][keep_]])
Image.fromarray(boxes.permute(1, 2, 0).numpy()).save(out / "detections.png")
"""


def timed(argv: list[str], out: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    grids = [p for p in out.rglob("[0-9]*_*.png") if "report" not in p.parts]
    assert len(grids) == 14, (argv[:3], len(grids))
    assert next(out.rglob("detections.png"), None) is not None
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=HERE.parent / "sample_images" / "cat.jpg")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-detection-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    script = work / "minimal.py"
    script.write_text(MINIMAL)
    exe = shutil.which("actviz", path=str(Path(sys.executable).parent)) or "actviz"
    image = str(args.image.resolve())

    def command(name: str, out: Path) -> list[str]:
        if name == "actviz":
            return [exe, "run", "fasterrcnn_resnet50_fpn", image, "-w", "none", "-o", str(out)]
        out.mkdir()
        return [sys.executable, str(script), image, str(out)]

    times = alternated(
        ["actviz", "minimal"], lambda name, out: timed(command(name, out), out), work, args.repeat
    )
    med = {name: statistics.median(t) for name, t in times.items()}
    print("fasterrcnn_resnet50_fpn, 1 image, 14 grids + detections; whole processes, median s")
    for name, seconds in med.items():
        print(f"  {name:8s} {seconds:6.2f} s  ({len(times[name])} runs)")
    print(f"actviz / minimal = {med['actviz'] / med['minimal']:.2f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
