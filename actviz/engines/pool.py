"""The Ray engine's actor pool: which actor runs which batches, and which actors have started.

Ray itself is only called through the ``ray`` module the pool is given (the driver's, or a
stand-in in tests); nothing here imports it.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["QUEUED", "START_TIMEOUT", "Batch", "Pool", "unschedulable"]

#: Batches queued on each actor: one running, the next waiting.
QUEUED = 2
#: Seconds an actor may wait to be scheduled and start before the driver gives up on it
#: (read when a pool is made).
START_TIMEOUT = 60.0


@dataclass
class Batch:
    indices: range
    deaths: int = 0  # actors that died while running it


class Pool:
    """The actors, and per actor the batches queued on it in the order they were sent."""

    def __init__(
        self,
        ray: Any,
        actor: Any,
        spec: Any,  # the WorkerSpec each actor is built from
        size: int,
        need: dict[str, float] | None = None,
    ) -> None:
        self.ray = ray
        self.actor = actor
        self.spec = spec
        self.need = need if need is not None else {"CPU": 1.0}  # what each actor asks for
        self.actors: list[Any] = [None] * size
        self.queued: list[deque[Any]] = [deque() for _ in range(size)]
        self.batches: dict[Any, tuple[int, Batch]] = {}  # in flight: ref -> (actor, batch)
        # Actors not started yet: their first call's ref -> (slot, when asked, a replacement?).
        self.starting: dict[Any, tuple[int, float, bool]] = {}
        self.retired: set[int] = set()  # slots whose actor the cluster could not start
        self.start_timeout = START_TIMEOUT
        for slot in range(size):
            self._start(slot, replacement=False)

    def _start(self, slot: int, *, replacement: bool) -> None:
        self.actors[slot] = self.actor.remote(self.spec)
        ready = self.actors[slot].ready.remote()
        self.starting[ready] = (slot, time.monotonic(), replacement)

    def free(self) -> int | None:
        """The actor with the fewest batches queued, if it has room for another."""
        slots = [i for i in range(len(self.actors)) if i not in self.retired]
        if not slots:
            return None
        slot = min(slots, key=lambda i: len(self.queued[i]))
        return slot if len(self.queued[slot]) < QUEUED else None

    def waiting(self) -> list[Any]:
        """The refs to wait on: the batches in flight and the starts not seen yet."""
        return [*self.batches, *self.starting]

    def timeout(self) -> float | None:
        """Seconds until the earliest start not seen yet is overdue; None when none is."""
        if not self.starting:
            return None
        first = min(since for _, since, _ in self.starting.values())
        return max(0.0, first + self.start_timeout - time.monotonic())

    def overdue(self) -> list[tuple[int, bool]]:
        """Give up on the actors not started within ``start_timeout`` seconds: each is killed
        (cancelling its scheduling), its slot retired; (slot, whether it was a replacement)
        for each."""
        now = time.monotonic()
        late = [
            (ref, slot, replacement)
            for ref, (slot, since, replacement) in self.starting.items()
            if now - since >= self.start_timeout
        ]
        for ref, slot, _ in late:
            del self.starting[ref]
            self.retired.add(slot)
            with contextlib.suppress(Exception):
                self.ray.kill(self.actors[slot], no_restart=True)
        return [(slot, replacement) for _, slot, replacement in late]

    def take_back(self, slot: int) -> list[Batch]:
        """The batches queued on a retired slot, oldest first, no longer in flight."""
        refs = list(self.queued[slot])
        self.queued[slot].clear()
        return [self.batches.pop(ref)[1] for ref in refs]

    def live(self) -> bool:
        """Whether any slot still has an actor that runs or may yet start."""
        return len(self.retired) < len(self.actors)

    def submit(self, slot: int, batch: Batch, paths: Sequence[Path]) -> None:
        ref = self.actors[slot].summarize.remote([str(paths[i]) for i in batch.indices])
        self.queued[slot].append(ref)
        self.batches[ref] = (slot, batch)

    def take(self, ref: Any) -> tuple[int, Batch]:
        slot, batch = self.batches.pop(ref)
        self.queued[slot].remove(ref)
        return slot, batch

    def replace(self, slot: int) -> list[Any]:
        """A fresh actor in place of a dead one; the refs that were queued on the dead one,
        oldest first."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[slot], no_restart=True)
        for ready in [r for r, (s, _, _) in self.starting.items() if s == slot]:
            del self.starting[ready]  # it died before its start was seen
        self._start(slot, replacement=True)
        refs = list(self.queued[slot])
        self.queued[slot].clear()
        return refs

    def stop(self) -> None:
        """Kill the actors, and with them the calls still queued on them."""
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)


def unschedulable(ray: Any, need: dict[str, float]) -> str:
    """Why an actor asking for ``need`` is not scheduled, from the cluster's resources."""
    try:
        total = ray.cluster_resources()
        free = ray.available_resources()
    except Exception:  # the cluster itself is gone
        return "the cluster does not answer"
    for name, amount in need.items():
        if total.get(name, 0.0) < amount:
            has = f"has {total.get(name, 0.0):g}" if name in total else "has none"
            return f"a worker needs {amount:g} {name} and the cluster {has} in all"
    for name, amount in need.items():
        if free.get(name, 0.0) < amount:
            return (
                f"the cluster has no free {name} ({free.get(name, 0.0):g} of "
                f"{total.get(name, 0.0):g} free, a worker needs {amount:g})"
            )
    return "the cluster did not schedule it although its resources look free (see `ray status`)"
