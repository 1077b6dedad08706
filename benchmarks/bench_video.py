"""What a user waits for with a video model: ``actviz run r3d_18 VIDEO`` as a whole process,
against a minimal hand-written hook script on the same clip, run the same way.

- actviz: ``actviz run r3d_18 VIDEO --layers conv --weights none`` with its defaults (a 16-frame
  clip at the weights' 15 fps from the middle of the video, time strips of 16 channels by 16
  frames, statistics, manifest and report).
- minimal: the least a script can do for the same pictures: import torch, torchvision and
  PyAV, decode the video, keep the same 16 frames, the weights' own transform, hook every
  Conv3d, one forward, per layer 16 channels x 16 frames min-max scaled into one palette PNG
  (``_common.floor_png``).
- import: ``import torch, torchvision`` and nothing else.

Each is a fresh process, run in turn so machine noise hits each alike; medians of
``--repeat`` runs are compared. Without ``--video`` a 4 s 320 x 240 mp4 is written first.

    python benchmarks/bench_video.py [--video clip.mp4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import alternated  # noqa: E402
from bench_process import IMPORT_ONLY, timed  # noqa: E402

#: r3d_18's Conv3d layers: the stem, 16 in its blocks, 3 downsamples.
CONV3D = 20

MINIMAL = f"""
import sys
from pathlib import Path

import av
import numpy as np
import torch
from torchvision.models import video as models
from torchvision.models.video import R3D_18_Weights

sys.path.insert(0, {str(HERE)!r})
from _common import floor_png

video, out = Path(sys.argv[1]), Path(sys.argv[2])
with av.open(str(video)) as container:
    stream = container.streams.video[0]
    duration = float(stream.duration * stream.time_base)
    start = max(0.0, (duration - 16 / 15) / 2)
    times = [start + k / 15 for k in range(16)]
    frames, held, k = [], None, 0
    for frame in container.decode(stream):
        while k < 16 and times[k] < frame.time:
            frames.append(held if held is not None else frame.to_ndarray(format="rgb24"))
            k += 1
        if k == 16:
            break
        held = frame.to_ndarray(format="rgb24")
    frames += [held] * (16 - len(frames))
clip = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)
x = R3D_18_Weights.DEFAULT.transforms()(clip)[None]
model = models.r3d_18(weights=None).eval()
acts = {{}}
for n, m in model.named_modules():
    if isinstance(m, torch.nn.Conv3d):
        m.register_forward_hook(lambda _m, _i, o, n=n: acts.__setitem__(n, o.detach().clone()))
with torch.inference_mode():
    model(x)
for i, (name, act) in enumerate(acts.items()):
    c, t, h, w = act[0, :16].shape
    floor_png(act[0, :16].reshape(c * t, h, w).numpy(), out / f"{{i:02d}}_{{name}}.png")
"""


def write_video(path: Path, seconds: float = 4.0, fps: int = 30) -> None:
    """A moving gradient, mpeg4 at 320 x 240."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        xs = np.linspace(0, 255, 320, dtype=np.float32)
        for i in range(int(seconds * fps)):
            row = ((xs + 4 * i) % 256).astype(np.uint8)
            pixels = np.broadcast_to(row[None, :, None], (240, 320, 3)).copy()
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--video", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(
        prefix="actviz-bench-video-", ignore_cleanup_errors=True
    ) as work:
        measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> None:
    """Every measurement, its files written under ``work``."""
    video = args.video.resolve() if args.video else work / "clip.mp4"
    if args.video is None:
        write_video(video)
    scripts = {"minimal": work / "minimal.py", "import": work / "import_only.py"}
    scripts["minimal"].write_text(MINIMAL)
    scripts["import"].write_text(IMPORT_ONLY)
    exe = shutil.which("actviz", path=str(Path(sys.executable).parent)) or "actviz"

    def command(name: str, out: Path) -> list[str]:
        if name == "actviz":
            return [exe, "run", "r3d_18", str(video), "-l", "conv", "-w", "none", "-o", str(out)]
        if name == "import":
            return [sys.executable, str(scripts[name]), "--no-output"]
        out.mkdir()
        return [sys.executable, str(scripts[name]), str(video), str(out)]

    times = alternated(
        ["actviz", "minimal", "import"],
        lambda name, out: timed(command(name, out), out, CONV3D),
        work,
        args.repeat,
    )
    med = {name: statistics.median(t) for name, t in times.items()}
    print("r3d_18, 1 video (16-frame clip at 112), --layers conv (20 layers); whole processes")
    for name, seconds in med.items():
        print(f"  {name:8s} {seconds:6.2f} s  ({len(times[name])} runs, median)")
    print(f"actviz / minimal = {med['actviz'] / med['minimal']:.2f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
