"""actviz optimize against Lucent's recipe run one channel at a time.

- actviz: ``actviz.optimize.optimize`` (resnet18, random weights, ``layer3``, 16 channels in
  one batch, every picture, the JSON and the page written).
- baseline: a faithful script of Lucent's ``render_vis`` as people use it, written out below:
  the same decorrelated Fourier parameterization (``fft_image`` + ``to_valid_rgb``), the same
  standard transforms, Adam at 0.05, the same steps and size, a forward hook on the layer and
  a full forward pass, one channel per run. Run on ``--baseline-channels`` channels and
  counted per channel.

Both in the same process, so the ratio holds on a noisy machine.

    python benchmarks/bench_optimize.py [--steps 256] [--size 128] [--channels 16]
        [--baseline-channels 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actviz.models import load_model  # noqa: E402
from actviz.optimize import optimize  # noqa: E402

MODEL = "resnet18"
LAYER = "layer3"

# Lucent's constants, as in lucent/optvis/param/color.py and transform.py.
SVD_SQRT = np.asarray(
    [[0.26, 0.09, 0.02], [0.27, 0.00, -0.05], [0.27, -0.09, 0.03]], dtype=np.float32
)
COLOR = SVD_SQRT / np.max(np.linalg.norm(SVD_SQRT, axis=0))


def rfft2d_freqs(h: int, w: int) -> np.ndarray:
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.fftfreq(w)[: w // 2 + (2 if w % 2 == 1 else 1)]
    return np.sqrt(fx * fx + fy * fy)


def fft_image(shape: tuple[int, int, int, int], device: str) -> tuple[list, object]:
    batch, channels, h, w = shape
    freqs = rfft2d_freqs(h, w)
    spectrum = (torch.randn(batch, channels, *freqs.shape, 2) * 0.01).to(device)
    spectrum.requires_grad_(True)
    scale = 1.0 / np.maximum(freqs, 1.0 / max(w, h))
    scale_t = torch.tensor(scale).float()[None, None, ..., None].to(device)

    def inner() -> torch.Tensor:
        scaled = torch.view_as_complex(scale_t * spectrum)
        image = torch.fft.irfftn(scaled, s=(h, w), norm="ortho")
        return image[:batch, :channels, :h, :w] / 4.0

    return [spectrum], inner


def to_valid_rgb(image_f: object, device: str) -> object:
    colour = torch.tensor(COLOR.T).to(device)

    def inner() -> torch.Tensor:
        image = image_f()  # type: ignore[operator]
        image = torch.matmul(image.permute(0, 2, 3, 1), colour).permute(0, 3, 1, 2)
        return torch.sigmoid(image)

    return inner


def standard_transforms(image: torch.Tensor) -> torch.Tensor:
    """pad(12, 0.5), jitter(8), random_scale, random_rotate, jitter(4), as Lucent draws them
    (numpy's global random state), with torch operations in place of kornia's."""

    def jitter(x: torch.Tensor, d: int) -> torch.Tensor:
        dx, dy = np.random.choice(d), np.random.choice(d)
        h, w = x.shape[-2:]
        return F.pad(x, (int(dx), 0, int(dy), 0))[..., :h, :w]

    image = F.pad(image, (12, 12, 12, 12), mode="constant", value=0.5)
    image = jitter(image, 8)
    scale = np.random.choice([1 + (i - 5) / 50.0 for i in range(11)])
    h, w = image.shape[-2:]
    size = [int(np.ceil(scale * h)), int(np.ceil(scale * w))]
    pad_x = max(0, int(np.ceil((w - size[1]) / 2)))
    pad_y = max(0, int(np.ceil((h - size[0]) / 2)))
    image = F.pad(
        F.interpolate(image, size=size, mode="bilinear", align_corners=True), [pad_y, pad_x] * 2
    )
    angle = np.deg2rad(np.random.choice(list(range(-10, 11)) + 5 * [0]))
    theta = torch.tensor(
        [[np.cos(angle), -np.sin(angle), 0.0], [np.sin(angle), np.cos(angle), 0.0]],
        dtype=image.dtype,
        device=image.device,
    )[None]
    grid = F.affine_grid(theta, list(image.shape), align_corners=False)
    image = F.grid_sample(image, grid, align_corners=False)
    return jitter(image, 4)


def lucent_one_channel(model: torch.nn.Module, channel: int, steps: int, size: int, device: str):
    """render_vis(model, f"{LAYER}:{channel}") with the default param and transforms."""
    params, image_f = fft_image((1, 3, size, size), device)
    image_f = to_valid_rgb(image_f, device)
    optimizer = torch.optim.Adam(params, lr=0.05)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
    features: dict[str, torch.Tensor] = {}
    module = dict(model.named_modules())[LAYER]
    handle = module.register_forward_hook(lambda m, i, o: features.__setitem__("out", o))
    try:
        for _ in range(steps):
            optimizer.zero_grad()
            model((standard_transforms(image_f()) - mean) / std)  # the whole model runs
            loss = -features["out"][:, channel].mean()
            loss.backward()
            optimizer.step()
    finally:
        handle.remove()
    return image_f().detach()  # type: ignore[operator]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--baseline-channels", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    loaded = load_model(MODEL, weights="none", device=args.device)
    model = loaded.module.eval()
    print(
        f"{MODEL} {LAYER}, {args.steps} steps at {args.size} px, device {args.device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    start = time.perf_counter()
    for channel in range(args.baseline_channels):
        lucent_one_channel(model, channel, args.steps, args.size, args.device)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    baseline = (time.perf_counter() - start) / args.baseline_channels
    print(f"Lucent recipe, one channel at a time: {baseline:.2f} s per channel")

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = optimize(
            MODEL,
            layers=LAYER,
            channels=f"0-{args.channels - 1}",
            steps=args.steps,
            size=args.size,
            weights="none",
            device=args.device,
            out=Path(tmp) / "out",
        )
        total = time.perf_counter() - start
    ours = total / result.channels
    print(
        f"actviz optimize, {result.channels} channels in one batch: {total:.1f} s, "
        f"{ours:.2f} s per channel (files and page included)"
    )
    print(f"ratio per channel: {baseline / ours:.1f}x faster")


if __name__ == "__main__":
    main()
