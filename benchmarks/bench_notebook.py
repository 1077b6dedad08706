"""What the notebook views cost: a watched training loop with and without ``w.live()``, and a
run's card for 20,000 images against one for 3.

- Live view: a small MLP (the fastest steps, where an overhead shows most), watched with
  ``every=10``; the same number of steps with ``w.live(every=50)`` (its display replaced by a
  stand-in that keeps each redraw, as IPython's would) and without, in alternating rounds on
  copies of the model, so a busy machine slows both alike. Printed: the median ratio of the
  live rounds' time to the plain rounds', and the redraws made. Target: within 1.05x.
- Cards: the HTML card of a synthetic run of 20,000 images and 500 layers (noise pictures, the
  worst case for PNG size) against one of 3 images and 8 layers (the same 7 thumbnails): the
  time to build each and their sizes. Target: the large one's bytes under ``CARD_MAX_BYTES``
  and its time about the small one's (each reads one image back).

    python benchmarks/bench_notebook.py [--steps 400] [--rounds 7]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _Handle:
    def __init__(self) -> None:
        self.shown = 0

    def update(self, obj: Any) -> None:
        self.shown += len(obj.data) > 0


def _train(model: Any, steps: int, folder: Path, live: bool) -> tuple[float, int]:
    import torch

    import actviz

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    start = time.perf_counter()
    with actviz.watch(model, opt, every=10, out=folder) as w:
        view = None
        if live:
            view = w.live(every=50)
            view._handle = _Handle()
        for _ in range(steps):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss=loss)
    seconds = time.perf_counter() - start
    return seconds, (view._handle.shown if view is not None else 0)


def live_view(steps: int, rounds: int) -> None:
    import torch

    torch.manual_seed(0)
    base = torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )
    ratios, draws = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        _train(copy.deepcopy(base), 20, Path(tmp) / "warm", False)  # imports, first calls
        for r in range(rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            times = {}
            for live in order:
                times[live], shown = _train(
                    copy.deepcopy(base), steps, Path(tmp) / f"{r}{live}", live
                )
                draws = max(draws, shown)
            ratios.append(times[True] / times[False])
        # One redraw on its own, on the log a live round left: the first reads the whole log,
        # a later one only the lines added since.
        from actviz.cards import LiveView

        view = LiveView(Path(tmp) / f"{rounds - 1}True" / "watch.jsonl", every=50)
        view._handle = _Handle()
        start = time.perf_counter()
        view.refresh()
        first = time.perf_counter() - start
        start = time.perf_counter()
        view.refresh()
        again = time.perf_counter() - start
    print(
        f"one redraw: {first * 1000:.1f} ms reading the whole log of {steps} steps, "
        f"{again * 1000:.1f} ms with no new lines"
    )
    print(
        f"live view: {steps} steps x {rounds} rounds, every=10, live every=50: "
        f"median ratio live / plain = {statistics.median(ratios):.3f}x "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); {draws} redraws per round"
    )


def cards() -> None:
    from actviz.cards import CARD_MAX_BYTES
    from tests.test_cards import synthetic_run

    with tempfile.TemporaryDirectory() as tmp:
        timed = {}
        for name, images, layers in (("3 images", 3, 8), ("20,000 images", 20_000, 500)):
            result, reads = synthetic_run(Path(tmp) / name, images, layers, nan_layer=0)
            start = time.perf_counter()
            card = result._repr_html_()
            timed[name] = time.perf_counter() - start
            print(
                f"card of {name:>13}: {len(card.encode()):>7,} bytes "
                f"(bound {CARD_MAX_BYTES:,}), {timed[name] * 1000:.0f} ms, "
                f"{sum(reads)} image(s) read back"
            )
        ratio = timed["20,000 images"] / timed["3 images"]
        print(f"card time 20,000 images / 3 images = {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    live_view(args.steps, args.rounds)
    cards()


if __name__ == "__main__":
    main()
