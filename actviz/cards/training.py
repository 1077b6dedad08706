"""Training in a notebook: the card of a training log, and a view that follows the log while
the loop runs.

:class:`LogFollower` reads only the lines appended since its last read (the log is flushed
line by line), keeping the latest step record, the flags and the first non-finite origin: a
refresh costs the new lines, not the whole log. :class:`LiveView` redraws one display in place,
only every ``every`` steps or when asked, so the loop pays one integer test per step.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.cards.card import MAX_FLAGS, Card, Table, href
from actviz.cards.results import fmt, stats_rows

__all__ = ["LiveView", "LogFollower", "TrainingState", "log_state", "training_card"]

#: Loss values kept for the live curve.
CURVE_POINTS = 200


@dataclass
class TrainingState:
    """What a card of a training log shows: plain records of the log."""

    path: Path
    start: Mapping[str, Any] = field(default_factory=dict)
    latest: Mapping[str, Any] | None = None
    """The latest ``step`` record."""
    recorded: int = 0
    """Recorded steps read."""
    first_nonfinite: Mapping[str, Any] | None = None
    flags: list[Mapping[str, Any]] = field(default_factory=list)
    end: Mapping[str, Any] | None = None
    losses: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))

    def add(self, record: Mapping[str, Any]) -> None:
        """Take one record of the log (a new ``start`` begins again)."""
        kind = record.get("kind")
        if kind == "start":  # a later run appended to the same log: its records only
            self.latest, self.recorded, self.first_nonfinite, self.end = None, 0, None, None
            self.flags, self.start = [], record
            self.losses.clear()
        elif kind == "step":
            if self.latest is None or int(record.get("step", 0)) >= int(self.latest.get("step", 0)):
                self.latest = record
            self.recorded += 1
            self.flags.extend(record.get("flags") or [])
            loss = record.get("loss")
            if isinstance(loss, int | float):
                self.losses.append((int(record.get("step", 0)), float(loss)))
        elif kind == "nonfinite" and self.first_nonfinite is None:
            self.first_nonfinite = record
        elif kind == "end":
            self.end = record


def log_state(log: Any) -> TrainingState:
    """The state of a log read whole (a ``TrainingLog``: its latest run's records)."""
    state = TrainingState(Path(log.path))
    for record in (log.start, *log.steps, *log.nonfinite):
        if record:
            state.add(record)
    if log.end is not None:
        state.add(log.end)
    return state


def _curve(points: Sequence[tuple[int, float]], width: int = 260, height: int = 60) -> str:
    """The loss over the recorded steps as a small inline SVG (no script, no file)."""
    if len(points) < 2:
        return ""
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    s0, s1 = min(steps), max(steps) or 1
    v0, v1 = min(values), max(values)
    span_s, span_v = max(s1 - s0, 1), (v1 - v0) or 1.0
    xs = [(s - s0) / span_s * (width - 4) + 2 for s in steps]
    ys = [height - 2 - (v - v0) / span_v * (height - 4) for v in values]
    xy = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" style="border:1px solid #eee">'
        f'<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{xy}"/></svg>'
        f'<div style="color:#57606a;font-size:11px">loss {fmt(values[-1])} at step {steps[-1]} '
        f"(range {fmt(v0)} .. {fmt(v1)})</div>"
    )


def training_card(
    state: TrainingState, *, steps: int | None = None, live: bool = False, name: str = "Watch"
) -> Card:
    """The card of a training log: the latest per-layer statistics, the flags, and where the
    first NaN or Inf came from. ``steps``: the steps the loop finished (a live watch knows);
    ``name``: what the plain text calls it."""
    latest = state.latest or {}
    layers: Mapping[str, Mapping[str, Any]] = latest.get("layers") or {}
    origin = state.first_nonfinite
    lines = []
    if origin is not None:
        lines.append(
            f"first {origin.get('value', 'NaN')} at step {origin.get('step')}: from "
            f"{origin.get('module')} ({origin.get('module_type') or '?'}) in the "
            f"{origin.get('phase')} pass"
        )
    lines += [
        f"step {f.get('step')}: {f.get('kind')} {f.get('target')}: {f.get('message')}"
        for f in state.flags[-MAX_FLAGS:]
    ]
    model = str(state.start.get("model") or "model")
    done = steps if steps is not None else (state.end or {}).get("steps")
    status = (
        "running"
        if state.end is None
        else ("stopped: " + str(state.end.get("error")) if state.end.get("error") else "finished")
    )
    facts = [
        ("status", f"{status}" + (f", {done:,} steps" if isinstance(done, int) else "")),
        ("latest recorded step", fmt(latest.get("step"))),
        ("loss", fmt(latest.get("loss"))),
        ("grad norm", fmt(latest.get("grad_norm"))),
        ("optimizer", str(state.start.get("optimizer") or "-")),
        ("recorded", f"every {state.start.get('every', '?')} steps, {state.recorded:,} so far"),
    ]
    summary = (
        f"{name}(model={model!r}, status={status!r}, latest_step={latest.get('step')}, "
        f"layers={len(layers)}, flags={len(state.flags)}, "
        f"first_nonfinite={origin.get('module') if origin else None!r}, log={str(state.path)!r})"
    )
    card = Card(
        kind="watch" + (" (live)" if live else ""),
        title=model,
        summary=summary,
        facts=facts,
        flags=lines,
        table=Table(
            ["layer", "mean", "std", "range", "zeros", "grad norm"],
            stats_rows(layers),
            len(layers),
            "layers",
        ),
        links=[("watch.jsonl", href(state.path))],
    )
    card.extra_html = _curve(list(state.losses))
    return card


class LogFollower:
    """Reads a training log as it grows: each :meth:`read` takes the lines appended since the
    last one (a torn last line waits for its end)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.state = TrainingState(self.path)
        self._offset = 0

    def read(self) -> TrainingState:
        """Take the new lines; the state as it now stands."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return self.state
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.state.add(record)
        self._offset += end
        return self.state


class LiveView:
    """One display that follows a training log: redrawn every ``every`` steps (:meth:`tick`)
    or when asked (:meth:`refresh`), never more often than that.

    Outside a notebook (no IPython kernel) it draws nothing and costs nothing.
    """

    def __init__(self, path: Path | str, every: int = 10, *, steps: Any = None) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a whole number of steps >= 1, not {every!r}")
        self.every = every
        self.follower = LogFollower(path)
        self._steps = steps
        self._handle: Any = None
        self.draws = 0

    def _repr_html_(self) -> str:
        return self.html()

    def html(self) -> str:
        """The card as it stands now (reads the new lines of the log)."""
        steps = self._steps() if callable(self._steps) else None
        return training_card(self.follower.read(), steps=steps, live=True).html()

    def show(self) -> LiveView:
        """Put the view in the cell's output (a display that later draws replace)."""
        try:
            from IPython import get_ipython
            from IPython.display import HTML, display
        except ImportError:
            return self
        if getattr(get_ipython(), "kernel", None) is None:  # a script, or a terminal shell
            return self
        self._handle = display(HTML(self.html()), display_id=True)  # type: ignore[no-untyped-call]
        self.draws += 1
        return self

    def tick(self, step: int) -> None:
        """Called at the end of each step: redraws on every ``every``-th."""
        if self._handle is not None and step % self.every == 0:
            self.refresh()

    def refresh(self) -> None:
        """Redraw now."""
        if self._handle is None:
            return
        from IPython.display import HTML

        self._handle.update(HTML(self.html()))  # type: ignore[no-untyped-call]
        self.draws += 1
