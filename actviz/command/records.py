"""A command that scores or draws images one by one (``cam-eval``, ``attribute``): the pass
over the images its ledger does not hold yet (:func:`ledger_pass`), and the stream of their
records, batch by batch, unreadable images among them as failed records
(:func:`batch_records`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.command.forward import BatchForward
from actviz.command.progress import Reporter, start_progress
from actviz.hooks import eval_mode
from actviz.results import ImageResult

if TYPE_CHECKING:
    from actviz.command.ledger import ImageLedger
    from actviz.command.opening import Command
    from actviz.command.options import ExecutionOptions
    from actviz.models import LoadedModel

__all__ = ["batch_records", "image_progress", "ledger_pass"]

Record = dict[str, Any]


def ledger_pass(
    cmd: Command,
    loaded: LoadedModel,
    ledger: ImageLedger,
    rels: Mapping[str, str],
    progress: Callable[[Mapping[str, Any]], ImageResult],
    score: Callable[[list[Path], Any, Any], Iterable[Record]],
) -> tuple[list[Record], int]:
    """Every found image's record in the inputs' order, and how many an earlier run's
    ledger gave (with ``--resume``): the others go through :func:`batch_records`
    (``score`` makes a batch's records), each appended to the ledger as it comes (``rels``:
    an image's path -> its name in the ledger; ``progress``: a record as the reporter counts
    it)."""
    assert cmd.found is not None
    images = cmd.found.images
    done = ledger.read(cmd.execution.resume)
    todo = [item.path for item in images if rels[str(item.path)] not in done]
    start_progress(cmd.notify, len(images), [progress(r) for r in done.values()])
    try:
        stream = batch_records(loaded, cmd.execution, todo, rels, cmd.notify, progress, score)
        for record in stream:
            done[record["image"]] = record
            ledger.append(record)
    finally:
        ledger.close()
    records = [done[rels[str(item.path)]] for item in images if rels[str(item.path)] in done]
    return records, len(images) - len(todo)


def image_progress(record: Mapping[str, Any], out_dir: PurePosixPath) -> ImageResult:
    """What the reporter is told of an image's record: done, or failed with its error."""
    result = ImageResult(path=Path(record["path"]), out_dir=out_dir)
    result.status = "ok" if record.get("status") == "ok" else "failed"
    result.error = record.get("error")
    return result


def batch_records(
    loaded: LoadedModel,
    execution: ExecutionOptions,
    todo: list[Path],
    rels: Mapping[str, str],
    notify: Reporter,
    progress: Callable[[Mapping[str, Any]], ImageResult],
    score: Callable[[list[Path], Any, Any], Iterable[Record]],
) -> Iterator[Record]:
    """Each image of ``todo``'s record, batch by batch: ``score(paths, logits, x)`` makes a
    batch's; an unreadable image's is a failed record naming why, given before the next
    batch's. Each is counted by ``notify`` as it is given. ``execution``: how the batches
    are run (the command's forced options over it)."""
    forward = BatchForward(loaded, loaded.module, execution)
    failed: list[Record] = []

    def on_failure(index: int, error: str | None) -> None:
        path = todo[index]
        failed.append(
            {"image": rels[str(path)], "path": str(path), "status": "failed", "error": error}
        )

    def flush() -> Iterator[Record]:
        for record in failed:
            notify.advance(progress(record))
            yield record
        failed.clear()

    with eval_mode(loaded.module), contextlib.ExitStack() as stack:
        for good, logits, x in forward.batches(todo, stack, on_failure):
            yield from flush()
            paths = [todo[index] for index, _, _ in good]
            for record in score(paths, logits, x):
                notify.advance(progress(record))
                yield record
    yield from flush()
