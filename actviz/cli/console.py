"""What the CLI shows: progress, results on stdout, messages and summaries on stderr.

Everything user-supplied (paths, layer names) is printed as plain text, never as rich markup,
so a file named ``[bold]x.jpg`` is shown as itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Container, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from actviz.api import ImageResult, LayerListing, RunResult

__all__ = [
    "Bar",
    "PaceLines",
    "PacedReporter",
    "RichReporter",
    "duration_words",
    "err_console",
    "error",
    "listing_json",
    "out_console",
    "print_columns",
    "print_flags",
    "print_grid",
    "print_listing",
    "print_run",
    "print_summary",
    "print_written",
    "pace_words",
    "rate_words",
    "warn",
]

out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    # One line, whatever a library or a user-supplied name put in the message.
    err_console.print(Text.assemble(("error: ", "bold red"), " ".join(message.split())))


def warn(message: str) -> None:
    err_console.print(Text.assemble(("warning: ", "bold yellow"), message))


def progress_bar(unit: str, total: int) -> tuple[Any, Any]:
    """A started rich progress bar on stderr counting ``total`` ``unit``s (done, rate, elapsed
    and remaining time), and its task; the caller fills the ``rate`` field."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn(unit),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    progress.start()
    return progress, progress.add_task(unit, total=total, rate="")


class Bar:
    """The reporter of a command that counts its own steps: warnings, and a progress bar on
    stderr that subclasses start (with :func:`progress_bar`) and advance."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.total = self.done = 0
        self._progress: Any = None
        self._task: Any = None
        self._said = 0.0

    def warn(self, message: str) -> None:
        warn(message)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class RichReporter:
    """Warnings and a progress bar on stderr; silent progress when stderr is not a terminal."""

    def __init__(self, *, quiet: bool, status: dict[str, Any]) -> None:
        # `status["progress"]` tells the CLI's error boundary how far an interrupted run got.
        self.status = status
        self.quiet = quiet
        self.done = 0
        self.total = 0
        self._progress: Any = None
        self._task: Any = None
        self._noted: set[str] = set()
        self.unit = "images"

    def warn(self, message: str) -> None:
        warn(message)

    def name_unit(self, unit: str) -> None:
        """What the units are: ``images``, a video model's ``clips``, a flow model's ``pairs``."""
        self.unit = unit

    def start(self, total: int) -> None:
        self.total = total
        self.status["progress"] = (
            "; run the same command with --resume to continue where it stopped"
        )
        if self.quiet or total < 2 or not err_console.is_terminal:
            return
        self._progress, self._task = progress_bar(self.unit, total)

    def advance(self, result: ImageResult) -> None:
        self.done += 1
        self.status["progress"] = (
            f" after {self.done} of {self.total} {self.unit}; run the same command with --resume "
            "to finish"
        )
        if result.status == "failed":
            err_console.print(
                Text.assemble(("failed: ", "bold red"), str(result.path), f": {result.error}")
            )
        from actviz.gradients.notes import layer_notes

        # Each all-zero gradient or Grad-CAM once, at the first image that shows it; the
        # manifest lists them all.
        for message in layer_notes(result):
            if message not in self._noted:
                self._noted.add(message)
                warn(f"{message} (in {result.path.name})")
        if self._progress is not None:
            self._progress.advance(self._task)
            speed = self._progress.tasks[0].speed
            if speed:
                per = "img" if self.unit == "images" else self.unit
                self._progress.update(self._task, rate=f"{speed:.1f} {per}/s")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class PaceLines:
    """When a plain progress line is due where stderr is not a terminal: at each new tenth
    of the work, or once ``every`` seconds passed since the last line."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.said = 0.0  # when the last line was said
        self._tenths = 0

    def due(self, done: int, total: int, now: float) -> bool:
        return done * 10 // total > self._tenths or now - self.said >= self.every

    def mark(self, done: int, total: int, now: float) -> None:
        """A line was said now, at ``done`` of ``total``."""
        self._tenths, self.said = done * 10 // total, now


class PacedReporter(RichReporter):
    """A reporter for commands that take seconds to minutes an image (``cam-eval``, a
    detector's ``run``): where stderr is not a terminal, a plain line with the pace and the
    time left after the first image, then at each tenth of the images or every ``every``
    seconds, so a piped run that takes an hour is not silent; none for a run expected to take
    less than ``every``. The pace counts only the images done now, not those a resumed run
    reused. With ``doing`` (``"scoring"``), a first line says what it does before the first
    image, for commands whose first image alone takes minutes."""

    command = "actviz"  #: what the lines start with
    doing: str | None = None  #: the opening line's verb; None: no opening line

    def __init__(self, *, quiet: bool, status: dict[str, Any], every: float = 30.0) -> None:
        super().__init__(quiet=quiet, status=status)
        self.every = every
        self._lines = PaceLines(every)
        self._started = 0.0
        self._reused = 0

    def start(self, total: int) -> None:
        super().start(total)
        self._started = self._lines.said = time.monotonic()

    def begin(self, reused: int) -> None:
        """``reused`` of the images were done by an earlier run: the pace counts the others,
        from now."""
        self._reused = reused
        self._started = self._lines.said = time.monotonic()
        if self.doing is None or self.quiet or self._progress is not None:
            return
        left = self.total - reused
        if left <= 0:
            return
        earlier = f" ({reused} done by the earlier run)" if reused else ""
        what = f"{self.command}: {self.doing} {left} {self.unit}{earlier}"
        self._say(f"{what}; the pace follows the first")

    def advance(self, result: ImageResult) -> None:
        super().advance(result)
        fresh = self.done - self._reused
        if self.quiet or self._progress is not None or fresh <= 0 or self.done >= self.total:
            return
        now = time.monotonic()
        if fresh > 1 and not self._lines.due(self.done, self.total, now):
            return
        pace = (now - self._started) / fresh
        if pace * (self.total - self._reused) < self.every:  # short: the summary is soon enough
            return
        self._lines.mark(self.done, self.total, now)
        self._say(
            f"{self.command}: {self.done} of {self.total} {self.unit}, {pace_words(pace)} "
            f"each, about {duration_words(pace * (self.total - self.done))} left"
        )

    @staticmethod
    def _say(line: str) -> None:
        err_console.print(line, markup=False, highlight=False)


def rate_words(count: float, seconds: float, unit: str = "images") -> str:
    """``12.5 images/s``; below one a second, two significant digits (``0.031 images/s``)."""
    rate = count / seconds if seconds > 0 else 0.0
    return f"{rate:.2g} {unit}/s" if rate < 1 else f"{rate:.1f} {unit}/s"


def pace_words(seconds: float) -> str:
    """``0.031 s``, ``2.5 s``, ``140 s``."""
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def duration_words(seconds: float) -> str:
    """``40 s``, ``12 min``, ``1.6 h``."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def print_columns(rows: list[list[str]], left: Container[int]) -> None:
    """``rows`` (the header first) as plain indented columns on stdout, for a pipe: the
    columns in ``left`` flush left, the others flush right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(r)]
        lines.append("  " + "  ".join(cells).rstrip())
    out_console.file.write("\n".join(lines) + "\n")


def print_grid(rows: Iterable[tuple[str, str]]) -> None:
    """A command's summary on stderr: a bold name and its words, a row each."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for name, words in rows:
        table.add_row(name, words)
    err_console.print(table)


def print_written(out: Path, *files: Path | None, more: Iterable[str] = ()) -> None:
    """``wrote a.json, b.png to OUT/``: the files written (None: not written), then ``more``."""
    written = [f.name for f in files if f is not None] + list(more)
    out_console.print(f"wrote {', '.join(written)} to {out}/", markup=False)


PRINTED = 50
"""How many images' predictions a run prints on stdout."""


def print_run(result: RunResult) -> None:
    note = " (random weights: meaningless)" if result.weights.random else ""
    ok = result.count("ok")
    single, printed = ok == 1, 0
    # Read back from the run's ledger one image at a time, the first PRINTED of them: a
    # folder of any size prints flat, and every image's are in the ledger and the report.
    from actviz.run.result import having

    for image in having(result.images, "ok"):
        if not image.predictions:
            continue
        if printed == PRINTED:
            out_console.print(
                f"... and the other images' predictions: actviz.read_images('{result.out}')"
                + (" or the report" if result.report is not None else ""),
                markup=False,
            )
            break
        printed += 1
        labels = [
            (p.label if p.label is not None else f"class {p.index}") for p in image.predictions
        ]
        if single:
            out_console.print(Text.assemble((str(image.path), "bold"), f" top-5{note}:"))
            for p, label in zip(image.predictions, labels, strict=True):
                out_console.print(f"  {_percent(p.probability):>6}  {label}", markup=False)
        else:  # one line per image keeps a folder run readable
            # Percent first and a bar between: labels may hold commas ("crane, bird").
            top = " | ".join(
                f"{_percent(p.probability, 0)} {label}"
                for p, label in zip(image.predictions, labels, strict=True)
            )
            out_console.print(Text.assemble((str(image.path), "bold"), f": {top}"))
    one = _units(result)[0]
    what = (
        f"wrote {result.grids_written} grid{'' if result.grids_written == 1 else 's'} for {ok} "
        f"{one}(s) ({result.files_written} files "
        "in all)"
        if result.render.get("grids", True)
        else f"wrote statistics for {ok} {one}(s)"
    )
    extras = [f"manifest: {result.manifest}"]
    if result.report is not None:
        extras.append(f"report: {result.report}")
    out_console.print(f"{what} to {result.out}/; {'; '.join(extras)}", markup=False)


def _percent(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}%}" if math.isfinite(value) else "n/a"


def _units(result: RunResult) -> tuple[str, str, str]:
    """``image``, ``images``, ``non-image``; a video model's clips, a flow model's pairs."""
    from actviz.command.progress import input_units

    return input_units(result.model_info.get("family"))


def print_summary(result: RunResult) -> None:
    """One screen on stderr: what the run did, how fast, and what went wrong."""
    done = result.count("ok")
    _one, many, other = _units(result)
    rate = rate_words(done, result.seconds, many) if result.seconds > 0 and done else "nothing new"
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        many,
        f"{done} done, {result.count('reused')} reused (--resume), "
        f"{result.count('failed')} failed, {len(result.skipped)} {other} skipped",
    )
    layers = f"{len(result.layers)} selected by '{result.selector}'"
    # A module called more than once in a forward (a block's reused ReLU) gives one output a
    # call, so an image can have more pictures than selected modules.
    from actviz.run.result import having

    first = next(having(result.images, "ok"), None)  # one read, not the whole ledger
    calls = len(first.layers) if first is not None else 0
    if calls > len(result.layers):
        layers += f"; {calls} outputs an image (a module called twice gives two)"
    table.add_row("layers", layers)
    if result.render.get("grids", True):
        table.add_row(
            "files",
            f"{result.grids_written} grid PNGs, {result.files_written} files in all, in "
            f"{result.out}/",
        )
    table.add_row("time", f"{result.seconds:.1f} s ({rate}) on {result.device}")
    undrawable = result.undrawable
    if undrawable:
        table.add_row("not drawn", f"{len(undrawable)} layer output(s), listed in the manifest")
    err_console.print(table)
    for key, reason in list(undrawable.items())[:5]:
        err_console.print(Text.assemble(("  not drawn ", "yellow"), key, f": {reason}"))
    # Failed images were named as they happened; skipped files only now.
    for path, reason in result.skipped[:5]:
        err_console.print(Text.assemble(("  skipped ", "yellow"), str(path), f": {reason}"))
    if len(result.skipped) > 5:
        err_console.print(f"  ... and {len(result.skipped) - 5} more in the manifest")


def print_flags(result: RunResult) -> None:
    """The most severe flagged layers, and where the first NaN or Inf came from."""
    hits = result.flags()
    if not hits:
        if result.stats is not None:
            err_console.print("no anomalies flagged", style="green")
        return
    table = Table(title="anomalies", title_justify="left", title_style="bold red")
    table.add_column("image", overflow="fold")
    table.add_column("layer", overflow="fold")
    table.add_column("flag", style="bold red")
    table.add_column("what", overflow="fold")
    for image, flag in hits[:15]:
        table.add_row(Text(image), Text(flag.layer), Text(flag.kind), Text(flag.message))
    err_console.print(table)
    counts = {kind: n for kind, n in result.flag_counts().items() if n}
    flagged = ", ".join(f"{kind} in {n}" for kind, n in counts.items())
    err_console.print(
        f"images flagged: {flagged}; every image's flags are in {result.out}/stats.parquet",
        markup=False,
    )
    run = (result.stats or {}).get("run") or {}
    if run.get("first_nonfinite"):
        err_console.print(
            Text.assemble(("first layer with NaN/Inf: ", "bold red"), str(run["first_nonfinite"]))
        )


def print_listing(listing: LayerListing) -> None:
    """A rich table on a terminal; plain aligned columns when piped (faster, and easy to grep
    or cut)."""
    if out_console.is_terminal:
        _listing_table(listing)
    else:
        _listing_plain(listing)
    if listing.selector is not None:
        selected = sum(1 for row in listing.layers if row.selected)
        out_console.print(
            f"'{listing.selector}' selects {selected} module(s); "
            f"`actviz run` would write {listing.grids} grid(s) per image",
            markup=False,
        )
    else:
        out_console.print(
            f"{len(listing.layers)} modules; preview a selection with --layers, e.g. --layers conv",
            markup=False,
        )
    if listing.family != "classification":
        out_console.print(f"family: {listing.family}", markup=False)
    if listing.note is not None:
        out_console.print(f"note: {listing.note}", markup=False)


def _listing_rows(listing: LayerListing) -> list[list[str]]:
    return [
        [
            *(["*" if row.selected else ""] if listing.selector is not None else []),
            row.name,
            row.module_type,
            str(row.shape) if row.shape is not None else "-",
            str(row.calls),
            f"{row.params:,}",
        ]
        for row in listing.layers
    ]


def _listing_plain(listing: LayerListing) -> None:
    header = ["name", "type", "output shape", "calls", "params"]
    if listing.selector is not None:
        header.insert(0, "sel")
    rows = [header, *_listing_rows(listing)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {len(header) - 2, len(header) - 1}  # calls and params line up on the right
    lines = [f"{listing.model}  (input {listing.input_shape})"]
    for r in rows:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
    out_console.file.write("\n".join(lines) + "\n")


def _listing_table(listing: LayerListing) -> None:
    table = Table(title=f"{listing.model}  (input {listing.input_shape})", title_justify="left")
    if listing.selector is not None:
        table.add_column("sel", justify="center")
    table.add_column("name", overflow="fold")
    table.add_column("type")
    table.add_column("output shape")
    table.add_column("calls", justify="right")
    table.add_column("params", justify="right")
    for row in listing.layers:
        cells = [
            Text(row.name),
            Text(row.module_type),
            Text(str(row.shape) if row.shape is not None else "-"),
            Text(str(row.calls)),
            Text(f"{row.params:,}"),
        ]
        if listing.selector is not None:
            cells.insert(0, Text("●", style="green") if row.selected else Text(""))
        table.add_row(*cells, style="bold" if row.selected else None)
    out_console.print(table)


def listing_json(listing: LayerListing) -> dict[str, Any]:
    return {
        "model": listing.model,
        "family": listing.family,
        "note": listing.note,
        "input_shape": list(listing.input_shape),
        "selector": listing.selector,
        "grids": listing.grids,
        "layers": [
            {
                "name": row.name,
                "type": row.module_type,
                "shape": list(row.shape) if row.shape is not None else None,
                "calls": row.calls,
                "params": row.params,
                "selected": row.selected,
            }
            for row in listing.layers
        ],
    }
