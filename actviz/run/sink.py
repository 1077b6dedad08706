"""Where every finished image of a run goes, once: the run's one seam for per-image results.

:meth:`RunSink.add` takes an image as it finishes (on either engine, or read back from the
ledger for ``--resume``), and:

- appends its record to the ledger (:class:`actviz.run.records.RunRecords`), the run's per-image
  record on disk;
- folds its layer statistics into the run's running summaries
  (:class:`actviz.statistics.RunningStats`) and writes them as rows of ``stats.parquet`` and
  ``stats.csv`` (:class:`actviz.statistics.StatsTable`);
- counts its files, notes and undrawable layers, and tells the reporter;
- then lets the image's layers go: memory does not grow with the number of images.

:meth:`RunSink.finish` writes ``stats.json`` and the run's gradient-flow chart from the
summaries; the manifest and the report are built from those and from the ledger.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.progress import Reporter
from actviz.errors import OutputError
from actviz.gradients.notes import notes_of
from actviz.results import ImageResult
from actviz.run.gradients import RunGradientFlow
from actviz.run.manifest import image_from_record, image_record
from actviz.run.records import RunRecords
from actviz.run.result import RunCounts, files_of
from actviz.statistics import (
    LayerStats,
    RunningStats,
    StatsTable,
    Thresholds,
    first_bad_layer,
    flag_anomalies,
)

if TYPE_CHECKING:
    from actviz.run.records import RunRecords
    from actviz.statistics import Thresholds

__all__ = ["RunSink", "load_images", "loader", "read_images", "report_images"]


class RunSink:
    """The run's per-image results, streamed to disk and folded into bounded summaries.

    Args:
        out: The output folder.
        records: The run's ledger.
        notify: Told of every image as it finishes.
        stats: Whether layer statistics are summarised and tabulated.
        thresholds: When statistics raise anomaly flags.
        random: Whether the weights are random (the flow chart says so).
        resume: For ``--resume``, the run's images, those an earlier run completed marked
            ``reused``: the summaries start from the earlier run's checkpoint when it holds
            exactly those of them it covers.
    """

    #: The checkpoint of the summaries and the table, beside the ledger.
    CHECKPOINT = ".actviz-summary.json"
    #: Seconds between checkpoints at least; a long run's are further apart (a twentieth of
    #: the time it has run), so that a run of any length writes a few dozen table parts.
    CHECKPOINT_SECONDS = 5.0

    def __init__(
        self,
        out: Path,
        records: RunRecords,
        notify: Reporter,
        *,
        stats: bool,
        thresholds: Thresholds | None = None,
        random: bool = False,
        resume: Sequence[ImageResult] | None = None,
    ) -> None:

        self.out = out
        self.records = records
        self.notify = notify
        self.thresholds = thresholds or Thresholds()
        self.random = random
        self.counts = RunCounts()
        self.notes: dict[str, str] = {}
        self.undrawable: dict[str, str] = {}
        self.gradient_flow = RunGradientFlow()
        self.running: Any = None
        self.table: Any = None
        # What a checkpoint must have been written with to be resumed from.
        self._key = json.loads(
            json.dumps(
                {
                    "settings": records.digest,
                    "stats": stats,
                    "thresholds": asdict(self.thresholds),
                }
            )
        )
        # The images folded (those a resume can reuse): how many, and a digest of their
        # ledger offsets that does not depend on their order.
        self.folded = 0
        self._offsets = 0
        self._started = self._saved = time.monotonic()
        self._remove_leftovers()
        state = self._checkpoint_of(resume) if resume is not None else None
        restored = self._parse(state) if state is not None else None
        if restored is None:
            state = None
        # A resume without a usable checkpoint folds the reused images at the end; till
        # then the summaries are not those of the ledger's images, and are not saved.
        self._replay_pending = resume is not None and state is None
        if stats:
            self.running = RunningStats()
            self.table = StatsTable(out, resume=state["table"] if state else None)
        if state is not None and restored is not None:
            try:
                self._restore(restored)
                # The few images done after the checkpoint, folded now: later checkpoints
                # then cover every line of the ledger.
                end = int(state["ledger_bytes"])
                self._replay(s for s in resume or () if (s.record or 0) >= end)
            except BaseException:
                self.abort()
                raise

    def add(self, result: ImageResult) -> None:
        """One image this run finished: recorded, summarised, reported, then let go."""
        record = image_record(result)
        self._fold(record, result.status)
        result.record = self.records.add(record)
        self._count(result.record, record, result.status)
        if not self._replay_pending:
            now = time.monotonic()
            wait = max(self.CHECKPOINT_SECONDS, (now - self._started) / 20)
            if now - self._saved > wait:
                self.checkpoint()
        grids, files = files_of(result)
        self.counts.grids += grids
        self.counts.files += files
        if result.status == "ok":
            for layer in result.layers:
                self.counts.overlays += "overlay" in layer.pictures
                self.counts.channels.setdefault(layer.key, layer.channels_total)
        self.notify.advance(result)
        result.let_go()

    def replay(self, stubs: Iterable[ImageResult]) -> None:
        """Fold in the images an earlier run completed (``--resume``), so the summaries and
        the table equal a clean run's: nothing left to do when they started from the
        earlier run's checkpoint, else their records read from the ledger one at a time."""
        if self._replay_pending:
            self._replay(stubs)
            self._replay_pending = False

    def _replay(self, stubs: Iterable[ImageResult]) -> None:
        with self.records.reader() as reader:
            for stub in stubs:
                if stub.status == "reused" and stub.record is not None:
                    record = reader.read(stub.record)
                    record.update(path=str(stub.path), out_dir=stub.out_dir.as_posix())
                    self._fold(record, stub.status)
                    self._count(stub.record, record, stub.status)

    def _count(self, offset: int, record: dict[str, Any], status: str) -> None:
        """An image folded, in the checkpoint's count and digest if a resume may reuse it or
        its fold added anything (an image that failed adds nothing; a resume redoes it)."""
        if status in ("ok", "reused") or record.get("layers"):
            self.folded += 1
            self._offsets = (self._offsets + _mix(offset)) & _MASK

    def checkpoint(self) -> None:
        """Save the summaries and the table so far beside the ledger, with the ledger's covered
        length (:meth:`actviz.output.Journal.sync`), so that ``--resume`` starts from them
        instead of reading every image back."""
        covered = self.records.sync()
        table = self.table.checkpoint() if self.table is not None else None
        self._save(covered, table)

    def _save(self, covered: int, table: dict[str, Any] | None) -> None:

        output.write_state(self.out / self.CHECKPOINT, self._state(covered, table))
        self._saved = time.monotonic()

    def _state(self, covered: int, table: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "format": 1,
            "key": self._key,
            "ledger_bytes": covered,
            "images": self.folded,
            "offsets": f"{self._offsets:016x}",
            "running": self.running.to_state() if self.running is not None else None,
            # "flow": the gradient flow, under the key earlier runs' checkpoints have.
            "flow": self.gradient_flow.to_state(),
            "notes": list(self.notes.items()),
            "undrawable": list(self.undrawable.items()),
            "table": table,
        }

    def _remove_leftovers(self) -> None:
        """A checkpoint's temporary left by a run killed while it wrote it."""

        try:
            output.remove_temporaries(self.out, [self.CHECKPOINT])
        except OSError as exc:
            raise OutputError(
                f"cannot remove {exc.filename}: {exc.strerror}; choose another --out"
            ) from None

    def _checkpoint_of(self, stubs: Sequence[ImageResult]) -> dict[str, Any] | None:
        """The earlier run's checkpoint, if it was saved with these settings and folded
        exactly the reused images whose records lie below the ledger length it covers;
        else None (changed inputs, files missing, an older ledger, a torn file)."""

        try:
            state = json.loads((self.out / self.CHECKPOINT).read_bytes())
            if state.get("format") != 1 or state.get("key") != self._key:
                return None
            covered = int(state["ledger_bytes"])
            if not self.records.journal.covers(covered):
                return None
            images, digest = 0, 0
            for stub in stubs:
                if stub.status == "reused" and stub.record is not None and stub.record < covered:
                    images += 1
                    digest = (digest + _mix(stub.record)) & _MASK
            if images != int(state["images"]) or digest != int(state["offsets"], 16):
                return None
            if self._key["stats"] and not (
                isinstance(state.get("table"), dict) and StatsTable.usable(self.out, state["table"])
            ):
                return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return state if isinstance(state, dict) else None

    def _parse(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """The checkpoint's summaries as objects, or None when they cannot be read."""

        try:
            running = state["running"]
            return {
                "running": RunningStats.from_state(running) if self._key["stats"] else None,
                "gradient_flow": RunGradientFlow.from_state(state["flow"]),
                "notes": {str(k): str(v) for k, v in state["notes"]},
                "undrawable": {str(k): str(v) for k, v in state["undrawable"]},
                "images": int(state["images"]),
                "offsets": int(state["offsets"], 16),
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def _restore(self, restored: dict[str, Any]) -> None:
        if self.running is not None:
            self.running = restored["running"]
        self.gradient_flow = restored["gradient_flow"]
        self.notes = restored["notes"]
        self.undrawable = restored["undrawable"]
        self.folded = restored["images"]
        self._offsets = restored["offsets"]

    def _fold(self, record: dict[str, Any], status: str) -> None:
        """One image's record into the summaries and the table; its flags into the record."""
        layers = record.get("layers") or []
        if self.running is not None and status in ("ok", "reused"):
            self._add_stats(record, layers)
        where = record["out_dir"]
        notes = notes_of(
            (x["name"], x.get("gradient"), x.get("cam_note"), x.get("cam_method")) for x in layers
        )
        for message in notes:
            self.notes.setdefault(message, where)
        for x in layers:
            if x.get("layout") == "none" and x["name"] not in self.undrawable:
                self.undrawable[x["name"]] = x.get("note") or "cannot be drawn"
        self.gradient_flow.add(where, layers)

    def finish(self) -> dict[str, Any] | None:
        """``stats.json``, the tables and the run's gradient-flow chart.

        Returns:
            The ``stats.json`` document, or None without statistics.
        """

        self.records.close()
        doc: dict[str, Any] | None = None
        if self.running is not None:
            doc = self.running.to_json(self.thresholds)
            gradients = self.gradient_flow.describe()
            if gradients:
                doc["gradients"] = gradients
            # The CSV's "(all)" rows, as before: only for a folder of more than one image.
            several = self.running.images > 1
            pooled = self.running.pooled() if several else None
            self.table.finish(pooled, self._pooled_flags() if several else [])
            output.write_json(self.out / "stats.json", doc)
        if not self._replay_pending:
            table = self.table.finished_state() if self.table is not None else None
            self._save(self.records.sync(), table)
        return doc

    def gradient_flow_chart(self) -> Path | None:
        """The run's gradient-flow chart, when gradients were taken."""
        return self.gradient_flow.write(self.out, random=self.random)

    def abort(self) -> None:
        """The run failed or was interrupted: what it recorded is synced to disk for
        ``--resume``, and no half-written table is left."""

        with contextlib.suppress(OutputError):  # the first error is the one to report
            self.records.close()
        if self.table is not None:
            self.table.abort()

    @property
    def notes_list(self) -> list[str]:
        """Each note once, with the first image it was seen in."""
        return [f"{message} (first in {where})" for message, where in self.notes.items()]

    def _add_stats(self, record: dict[str, Any], layers: list[dict[str, Any]]) -> None:

        stats = [(x["name"], LayerStats.from_dict(x["stats"])) for x in layers if x.get("stats")]
        if not stats:
            return
        flags = self.running.add_image(record["out_dir"], stats, self.thresholds)
        self.table.add(record["out_dir"], record["path"], stats, flags)
        # Its flags travel with its record: the report's index reads them there.
        record["flags"] = [f.to_dict() for f in flags]
        record["first_nonfinite"] = first_bad_layer(flags)

    def _pooled_flags(self) -> list[Any]:

        return flag_anomalies(self.running.pooled(), self.thresholds)


_MASK = (1 << 64) - 1


def _mix(offset: int) -> int:
    """A 64-bit hash of a ledger offset (splitmix64's finaliser): summed over a set of
    offsets, a digest that does not depend on their order."""
    z = (offset + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def load_images(records: RunRecords, stubs: Iterable[ImageResult]) -> Iterator[ImageResult]:
    """The full results of these stubs, read back from the ledger one at a time."""
    with records.reader() as reader:
        for stub in stubs:
            if stub.record is None:
                yield stub
            else:
                yield image_from_record(reader.read(stub.record), stub)


def loader(records: RunRecords) -> Any:
    """:func:`load_images` bound to a ledger, for :class:`actviz.run.result.ImageRecords`."""

    def load(stubs: Iterable[ImageResult]) -> Iterator[ImageResult]:
        return load_images(records, stubs)

    return load


def report_images(
    sink: RunSink,
    stubs: Sequence[ImageResult],
    stats: Mapping[str, Any] | None,
    *,
    folders: bool,
) -> Any:
    """What the report shows of the run's images (:class:`actviz.report.ReportImages`):
    every image as an index row, read from the ledger as the pages are made, and the full
    records of the few it gives pages: the first images, the worst of each flag kind, the
    first failures."""
    from actviz.report.pages import LINKED_FIRST, LISTED, WORST_LINKED, ReportImages, image_row

    worst = {
        entry["image"]
        for entries in ((stats or {}).get("flags") or {}).get("worst", {}).values()
        for entry in entries[:WORST_LINKED]
    }
    chosen: list[ImageResult] = []
    drawn = failed = 0
    for stub in stubs:
        if stub.status == "failed":
            failed += 1
            if failed <= LISTED:
                chosen.append(stub)
        elif stub.status in ("ok", "reused"):
            drawn += 1
            if drawn <= LINKED_FIRST or stub.out_dir.as_posix() in worst:
                chosen.append(stub)
    linked = list(_records(sink, chosen))

    def rows() -> Iterator[dict[str, Any]]:
        return (image_row(record) for record in _records(sink, stubs))

    return ReportImages(total=len(stubs), failed=failed, linked=linked, rows=rows, folders=folders)


def _records(sink: RunSink, stubs: Iterable[ImageResult]) -> Iterator[dict[str, Any]]:
    """The stubs' full records, with this run's status and flags (an earlier run's record
    may carry flags raised with other thresholds)."""

    with sink.records.reader() as reader:
        for stub in stubs:
            record = {} if stub.record is None else reader.read(stub.record)
            record.update(path=str(stub.path), out_dir=stub.out_dir.as_posix())
            record["status"] = stub.status
            record["error"] = stub.error or record.get("error")
            if stub.status == "reused" and sink.running is not None:
                layers = [
                    (x["name"], LayerStats.from_dict(x["stats"]))
                    for x in record.get("layers") or []
                    if x.get("stats")
                ]
                flags = flag_anomalies(layers, sink.thresholds)
                record["flags"] = [f.to_dict() for f in flags]
                record["first_nonfinite"] = first_bad_layer(flags)
            yield record


def read_images(out: Path | str) -> Iterator[dict[str, Any]]:
    """Every image record of the run in ``out``, read from its ledger one at a time: what
    ``manifest.json`` listed per image before runs kept it on disk (path, folder, status, size,
    predictions, and per layer its statistics and files).

    An image done again by ``--resume`` is given once, as last recorded.

    Example:
        >>> for image in actviz.read_images("actviz-out"):
        ...     print(image["path"], image["predictions"][0]["label"])
    """

    records = RunRecords(Path(out), {})
    last: dict[tuple[str, str], int] = {}
    for offset, head, _ in records.heads():
        if "out_dir" in head and "path" in head:
            last[(head["path"], head["out_dir"])] = offset
    with records.reader() as reader:
        for offset in sorted(last.values()):
            yield reader.read(offset)
