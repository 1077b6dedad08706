"""The decode-ahead thread stops within about a second of the consumer stopping, whatever it
was doing: waiting to hand over a batch or the end, or decoding a long batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from actviz.io.loader import decode_batches

from .conftest import make_image


def _decoders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "actviz-decode" and t.is_alive()]


class _Slow:
    """A preprocessing that takes ``seconds`` per image."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, picture: Image.Image) -> torch.Tensor:
        time.sleep(self.seconds)
        return torch.zeros(3, 8, 8)


@pytest.fixture
def paths(tmp_path: Path) -> list[Path]:
    return [make_image(tmp_path / f"{i}.png", size=(8, 8), seed=i) for i in range(40)]


def _stop_after_first(paths: list[Path], seconds: float, batch_size: int, wait: float) -> float:
    assert not _decoders()
    batches = decode_batches(paths, _Slow(seconds), batch_size=batch_size)
    first = next(batches)
    assert [item.index for item in first] == list(range(batch_size))
    time.sleep(wait)  # the consumer stops reading; the thread fills the queue or decodes
    started = time.monotonic()
    batches.close()
    for thread in _decoders():
        thread.join(timeout=10)
    return time.monotonic() - started


def test_a_thread_waiting_to_hand_over_the_end_stops_at_once(paths: list[Path]) -> None:
    # Three batches of one: the queue (two slots) takes the last two, and the thread is
    # left waiting to hand over the end, which nobody will read.
    elapsed = _stop_after_first(paths[:3], 0.0, 1, 0.5)
    assert elapsed < 1.5 and not _decoders()


def test_a_thread_decoding_a_long_batch_stops_between_images(paths: list[Path]) -> None:
    # Batches of 16 images of 0.1 s each: 1.6 s per batch; the stop comes mid-batch.
    elapsed = _stop_after_first(paths, 0.1, 16, 0.3)
    assert elapsed < 1.5 and not _decoders()


def test_a_thread_waiting_on_a_full_queue_stops_at_once(paths: list[Path]) -> None:
    elapsed = _stop_after_first(paths, 0.0, 2, 0.5)
    assert elapsed < 1.5 and not _decoders()


def test_top_images_interrupted_while_drawing_drops_the_queued_sheets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz
    import actviz.top_images.pipeline as pipeline

    torch.manual_seed(0)
    wide = torch.nn.Sequential(torch.nn.Conv2d(3, 512, 3, padding=1), torch.nn.ReLU())
    for i in range(3):
        make_image(tmp_path / "in" / f"{i}.png", size=(16, 16), seed=i)

    def interrupted(**_: object) -> None:  # Ctrl-C once every sheet is queued
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "document", interrupted)
    with pytest.raises(KeyboardInterrupt):
        actviz.top_images(
            wide,
            [tmp_path / "in"],
            out=tmp_path / "out",
            layers="1",
            k=2,
            input_size=(16, 16),
            device="cpu",
            report=False,
        )
    sheets = list((tmp_path / "out").rglob("*.png"))
    assert len(sheets) < 256, len(sheets)  # most of the 512 never started
    assert not [t for t in threading.enumerate() if t.name.startswith("actviz-pictures")]
