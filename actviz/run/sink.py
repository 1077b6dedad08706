"""Where every finished image of a run goes, once: the run's one seam for per-image results.

:meth:`RunSink.add` takes an image as it finishes (on either engine, or read back from the
ledger for ``--resume``), and:

- appends its record to the ledger (:class:`actviz.output.RunRecords`), the run's per-image
  record on disk;
- folds its layer statistics into the run's running summaries
  (:class:`actviz.stats.RunningStats`) and writes them as rows of ``stats.parquet`` and
  ``stats.csv`` (:class:`actviz.stats.StatsTable`);
- counts its files, notes and undrawable layers, and tells the reporter;
- then lets the image's layers go: memory does not grow with the number of images.

:meth:`RunSink.finish` writes ``stats.json`` and the run's gradient-flow chart from the
summaries; the manifest and the report are built from those and from the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.results import ImageResult, Reporter, RunCounts, files_of, notes_of
from actviz.run.gradients import RunFlow
from actviz.run.manifest import image_from_record, image_record

if TYPE_CHECKING:
    from actviz.output import RunRecords
    from actviz.stats import Thresholds

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
    """

    def __init__(
        self,
        out: Path,
        records: RunRecords,
        notify: Reporter,
        *,
        stats: bool,
        thresholds: Thresholds | None = None,
        random: bool = False,
    ) -> None:
        from actviz.stats import Thresholds

        self.out = out
        self.records = records
        self.notify = notify
        self.thresholds = thresholds or Thresholds()
        self.random = random
        self.counts = RunCounts()
        self.notes: dict[str, str] = {}
        self.undrawable: dict[str, str] = {}
        self.flow = RunFlow()
        self.running: Any = None
        self.table: Any = None
        if stats:
            from actviz.stats import RunningStats, StatsTable

            self.running = RunningStats()
            self.table = StatsTable(out)

    def add(self, result: ImageResult) -> None:
        """One image this run finished: recorded, summarised, reported, then let go."""
        record = image_record(result)
        self._fold(record, result.status)
        result.record = self.records.add(record)
        grids, files = files_of(result)
        self.counts.grids += grids
        self.counts.files += files
        self.notify.advance(result)
        result.let_go()

    def replay(self, stubs: Iterable[ImageResult]) -> None:
        """Fold in the images an earlier run completed (``--resume``), their records read
        from the ledger one at a time, so the summaries and the table equal a clean run's."""
        with self.records.reader() as reader:
            for stub in stubs:
                if stub.status == "reused" and stub.record is not None:
                    record = reader.read(stub.record)
                    record.update(path=str(stub.path), out_dir=stub.out_dir.as_posix())
                    self._fold(record, stub.status)

    def _fold(self, record: dict[str, Any], status: str) -> None:
        """One image's record into the summaries and the table; its flags into the record."""
        layers = record.get("layers") or []
        if self.running is not None and status in ("ok", "reused"):
            self._add_stats(record, layers)
        where = record["out_dir"]
        notes = notes_of((x["name"], x.get("gradient"), x.get("cam_note")) for x in layers)
        for message in notes:
            self.notes.setdefault(message, where)
        for x in layers:
            if x.get("layout") == "none" and x["name"] not in self.undrawable:
                self.undrawable[x["name"]] = x.get("note") or "cannot be drawn"
        self.flow.add(where, layers)

    def finish(self) -> dict[str, Any] | None:
        """``stats.json``, the tables and the run's gradient-flow chart.

        Returns:
            The ``stats.json`` document, or None without statistics.
        """
        from actviz import output

        self.records.close()
        doc: dict[str, Any] | None = None
        if self.running is not None:
            doc = self.running.to_json(self.thresholds)
            gradients = self.flow.describe()
            if gradients:
                doc["gradients"] = gradients
            # The CSV's "(all)" rows, as before: only for a folder of more than one image.
            several = self.running.images > 1
            pooled = self.running.pooled() if several else None
            self.table.finish(pooled, self._pooled_flags() if several else [])
            output.write_json(self.out / "stats.json", doc)
        return doc

    def flow_chart(self) -> Path | None:
        """The run's gradient-flow chart, when gradients were taken."""
        return self.flow.write(self.out, random=self.random)

    def abort(self) -> None:
        """The run failed or was interrupted: what it recorded is synced to disk for
        ``--resume``, and no half-written table is left."""
        import contextlib

        from actviz.errors import OutputError

        with contextlib.suppress(OutputError):  # the first error is the one to report
            self.records.close()
        if self.table is not None:
            self.table.abort()

    @property
    def notes_list(self) -> list[str]:
        """Each note once, with the first image it was seen in."""
        return [f"{message} (first in {where})" for message, where in self.notes.items()]

    def _add_stats(self, record: dict[str, Any], layers: list[dict[str, Any]]) -> None:
        from actviz.stats import LayerStats, first_bad_layer

        stats = [(x["name"], LayerStats.from_dict(x["stats"])) for x in layers if x.get("stats")]
        if not stats:
            return
        flags = self.running.add_image(record["out_dir"], stats, self.thresholds)
        self.table.add(record["out_dir"], record["path"], stats, flags)
        # Its flags travel with its record: the report's index reads them there.
        record["flags"] = [f.to_dict() for f in flags]
        record["first_nonfinite"] = first_bad_layer(flags)

    def _pooled_flags(self) -> list[Any]:
        from actviz.stats import flag_anomalies

        return flag_anomalies(self.running.pooled(), self.thresholds)


def load_images(records: RunRecords, stubs: Iterable[ImageResult]) -> Iterator[ImageResult]:
    """The full results of these stubs, read back from the ledger one at a time."""
    with records.reader() as reader:
        for stub in stubs:
            if stub.record is None:
                yield stub
            else:
                yield image_from_record(reader.read(stub.record), stub)


def loader(records: RunRecords) -> Any:
    """:func:`load_images` bound to a ledger, for :class:`actviz.results.ImageRecords`."""

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
    from actviz.stats import LayerStats, first_bad_layer, flag_anomalies

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
    from actviz.output import RunRecords

    records = RunRecords(Path(out), {})
    last: dict[tuple[str, str], int] = {}
    for offset, line in records.lines():
        head, tab, _ = line.partition(b"\t")
        try:
            record = json.loads(head if tab else line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(record, dict) and "out_dir" in record and "path" in record:
            last[(record["path"], record["out_dir"])] = offset
    with records.reader() as reader:
        for offset in sorted(last.values()):
            yield reader.read(offset)
