"""The state of a ``top-images`` pass: the running top-k and the ledger of the images it
holds, saved together every few seconds and when the pass stops early; the images that could
not be scored; and which images a resumed pass still has to score."""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from actviz.command.progress import Reporter, start_progress
from actviz.results import ImageResult
from actviz.top_images.checkpoint import Checkpoint, Ledger, save_checkpoint
from actviz.top_images.document import SHOWN
from actviz.top_images.topk import Candidates, TopK

__all__ = ["CHECKPOINT_SECONDS", "Failures", "Progress", "still_to_score"]

#: Seconds between two saves of the state during the pass (and always on interruption).
CHECKPOINT_SECONDS = 5.0


def still_to_score(
    paths: list[Path], earlier: Checkpoint | None, out: Path, notify: Reporter
) -> list[Path]:
    """The images still to score, the earlier run's reported as reused.

    The done images are streamed from the ledger twice (to count, then to report) and matched
    by 64-bit string hash, so resuming holds 8 bytes per image, never a set of paths. Two
    different paths hashing alike is about one chance in 10**7 at a million images.
    """

    if earlier is None:
        start_progress(notify, len(paths))
        return paths
    done = np.unique(np.fromiter((hash(p) for p in earlier.paths(out)), np.int64))
    mine = np.fromiter((hash(str(p)) for p in paths), np.int64, len(paths))
    left = ~np.isin(mine, done)
    del mine, done
    todo = [p for p, keep in zip(paths, left.tolist(), strict=True) if keep]
    reused = (
        ImageResult(path=Path(path), out_dir=PurePosixPath("."), status="reused")
        for path in earlier.paths(out)
    )
    start_progress(notify, len(todo) + earlier.images, reused)
    return todo


@dataclass(frozen=True)
class _State:
    """The top-k and how many images (and bytes of ledger) it covers."""

    top: TopK
    images: int  # images merged into ``top``, the earlier run's included
    ledger_bytes: int  # the length of the ledger that lists them


class Failures:
    """Images that could not be scored: a count, and the first ``SHOWN`` by path
    (each one is also reported as it fails), so a folder of broken files costs no memory."""

    def __init__(self) -> None:
        self.count = 0
        self._kept: list[tuple[Path, str]] = []

    def add(self, path: Path, reason: str) -> None:

        self.count += 1
        bisect.insort(self._kept, (path, reason))
        del self._kept[SHOWN:]

    def shown(self) -> list[tuple[Path, str]]:
        """The first ``SHOWN`` failures by path."""
        return list(self._kept)


class Progress:
    """The accumulator and the ledger of the images it holds, saved together.

    A batch's paths are appended to the ledger first; then one assignment makes the state that
    includes them current. An interruption between the two leaves the extra line out of what
    is saved (the state records the ledger's length), so a saved state and its list of done
    images always agree.
    """

    def __init__(
        self, out: Path, settings: dict[str, Any], k: int, earlier: Checkpoint | None
    ) -> None:

        self.out = out
        self.settings = settings
        self.ledger = Ledger(out, earlier)
        self.reused = earlier.images if earlier is not None else 0
        top = earlier.top if earlier is not None else TopK(k)
        self.state = _State(top, self.reused, self.ledger.size)
        self.saved: _State | None = None
        self.failed = Failures()
        self.last_save = time.monotonic()
        self.resized = 0  # images scored on maps pooled to the planned size
        self.resized_layers: dict[str, tuple[int, ...]] = {}

    @property
    def top(self) -> TopK:
        return self.state.top

    def add(self, paths: list[str], top: TopK) -> None:
        end = self.ledger.append(paths)
        self.state = _State(top, self.state.images + len(paths), end)

    def fail(self, path: Path, error: str | None, notify: Reporter) -> None:
        """An image that could not be scored: named, counted, skipped."""
        reason = error or "unreadable"
        self.failed.add(path, reason)
        notify.advance(ImageResult(path, PurePosixPath("."), status="failed", error=reason))

    def merge(
        self,
        paths: list[Path],
        sizes: Sequence[tuple[int, int] | None],
        candidates: Candidates,
        notify: Reporter,
    ) -> None:
        """One batch's candidates into the top-k; saved every few seconds."""
        self.add([str(p) for p in paths], self.top.updated(candidates))
        for path, size in zip(paths, sizes, strict=True):
            notify.advance(ImageResult(path, PurePosixPath("."), size=size))
        if time.monotonic() - self.last_save >= CHECKPOINT_SECONDS:
            self.save()

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Save at the end of the pass, and when it stops early: --resume continues there."""
        try:
            yield
        except BaseException:
            # A failing save must not hide the first error.
            with contextlib.suppress(Exception):
                self.save()
            raise
        self.save()

    def save(self) -> None:
        state = self.state
        if state is self.saved or state.images == self.reused:
            return  # nothing new; and a run that scored nothing leaves no state behind
        self.ledger.flush()  # the lines the state covers are on disk before it
        save_checkpoint(
            self.out,
            self.settings,
            state.top,
            images=state.images,
            ledger_bytes=state.ledger_bytes,
        )
        self.saved = state
        self.last_save = time.monotonic()
