"""Streaming: decode ahead of the model, and keep what is in flight bounded.

Images are decoded and preprocessed ahead of the forward pass (a background thread, or
DataLoader worker processes with ``workers > 0``), batched, and handed to the model; rendering
and PNG writing of one batch overlap the next batch's forward. Every queue is bounded, so
memory does not grow with the size of the folder.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ImageLoadError
from actviz.io.images import load_rgb

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = ["Decoded", "decode_batches"]

_PREFETCH_BATCHES = 2


@dataclass
class Decoded:
    """One input after decoding: a preprocessed tensor, or why there is none."""

    index: int
    tensor: torch.Tensor | None
    size: tuple[int, int] | None
    error: str | None = None


class _Decoder:
    """Picklable, so DataLoader workers can run it."""

    def __init__(
        self,
        paths: Sequence[Path],
        preprocess: Callable[[Image.Image], torch.Tensor],
    ) -> None:
        self.paths = list(paths)
        self.preprocess = preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Decoded:

        try:
            # Clips and pairs are read from their file (or folder) by the preprocessing.
            read = getattr(self.preprocess, "read_file", None)
            if read is not None:
                tensor, size = read(self.paths[index])
                return Decoded(index, tensor, size)
            picture = load_rgb(self.paths[index])
            return Decoded(index, self.preprocess(picture), picture.size)
        except ImageLoadError as exc:
            return Decoded(index, None, None, exc.reason)
        except (OSError, ValueError, RuntimeError) as exc:  # preprocessing failed on it
            return Decoded(index, None, None, f"cannot preprocess: {exc}")


def stacked_parts(
    paths: Sequence[Path],
    preprocess: Callable[[Image.Image], torch.Tensor],
    device: Any,
) -> Iterator[tuple[list[Decoded], list[Decoded], torch.Tensor | None]]:
    """One batch of ``paths`` as parts that stack (split where the input shape changes, as a
    preprocessing that keeps each image's aspect ratio makes it): per part, the inputs that
    failed to decode, those that did, and theirs stacked on ``device`` (None when none did)."""
    import torch

    for part in decode_batches(paths, preprocess, batch_size=len(paths)):
        good = [d for d in part if d.tensor is not None]
        bad = [d for d in part if d.tensor is None]
        x = (
            torch.stack([d.tensor for d in good if d.tensor is not None]).to(device)
            if good
            else None
        )
        yield bad, good, x


def decode_batches(
    paths: Sequence[Path],
    preprocess: Callable[[Image.Image], torch.Tensor],
    *,
    batch_size: int,
    workers: int = 0,
    pin_memory: bool = False,
) -> Generator[list[Decoded], None, None]:
    """Yield the inputs decoded and preprocessed, ``batch_size`` at a time, in order.

    Args:
        paths: Image files.
        preprocess: PIL image -> CHW float tensor.
        batch_size: Inputs per batch (failures included, so batches may hold fewer tensors;
            a batch is also split where the input shape changes, so that each one stacks).
        workers: DataLoader worker processes; 0 decodes in one background thread.
        pin_memory: Pin batches for fast, asynchronous copies to a GPU.
    """
    dataset = _Decoder(paths, preprocess)
    if workers > 0:
        from torch.utils.data import DataLoader

        loader: Any = DataLoader(
            dataset,  # type: ignore[arg-type]
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=list,
            pin_memory=False,
            prefetch_factor=2,
        )
        for batch in loader:
            yield from _same_shapes(_pinned(batch) if pin_memory else batch)
        return

    def batches(stop: threading.Event) -> Iterator[list[Decoded]]:
        for start in range(0, len(dataset), batch_size):
            batch = []
            for i in range(start, min(start + batch_size, len(dataset))):
                if stop.is_set():  # checked per image: a stop waits for one decode at most
                    return
                batch.append(dataset[i])
            yield from _same_shapes(_pinned(batch) if pin_memory else batch)

    yield from _threaded(batches)


def _same_shapes(batch: list[Decoded]) -> Iterator[list[Decoded]]:
    """Split a batch, in order, where the input shape changes, so each part stacks.

    Only inputs that keep the image's aspect ratio (segmentation presets, which resize
    without a crop) differ in shape; a batch of cropped inputs comes back whole.
    """
    part: list[Decoded] = []
    shape: tuple[int, ...] | None = None
    for item in batch:
        current = None if item.tensor is None else tuple(item.tensor.shape)
        if current is not None:
            if shape is not None and current != shape:
                yield part
                part = []
            shape = current
        part.append(item)
    if part:
        yield part


def _pinned(batch: list[Decoded]) -> list[Decoded]:
    for item in batch:
        if item.tensor is not None:
            item.tensor = item.tensor.pin_memory()
    return batch


#: Seconds a blocked hand-over waits before looking at the stop request again.
_POLL = 0.05
#: Seconds to wait for the decoder thread at shutdown; it stops within one image's decode.
_JOIN_SECONDS = 5.0


def _threaded(
    make: Callable[[threading.Event], Iterator[list[Decoded]]],
) -> Generator[list[Decoded], None, None]:
    """Run ``make(stop)`` in a background thread, at most a couple of batches ahead.

    The thread never blocks for long: every hand-over (batches, the end, an error) waits on
    the bounded queue in short steps that look at ``stop``, and ``make`` looks at it between
    images. When the consumer stops early (Ctrl-C, an error, ``close()``), the queue is
    drained so a waiting hand-over returns at once, and the thread ends within about one
    image's decode.
    """
    slots: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=_PREFETCH_BATCHES)
    stop = threading.Event()

    def offer(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in make(stop):
                if not offer(("batch", batch)):
                    return
            offer(("end", None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            offer(("error", exc))

    thread = threading.Thread(target=produce, name="actviz-decode", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        _drain(slots)
        thread.join(timeout=_JOIN_SECONDS)
        _drain(slots)  # what was handed over meanwhile: nothing keeps its tensors alive


def _drain(slots: queue.Queue[tuple[str, Any]]) -> None:
    while True:
        try:
            slots.get_nowait()
        except queue.Empty:
            return
