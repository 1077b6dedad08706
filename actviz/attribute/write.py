"""What ``attribute`` writes at the end, from every image's record: ``attribute.json`` and
``attribute.html``; and the warnings the axioms give."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.attribute.axioms import summarize, warning
from actviz.attribute.result import RECORD, AttributeResult, AttributeState
from actviz.gradients.registry import MAP_METHODS
from actviz.report.attribute import attribute_page

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.command.opening import Loaded

__all__ = ["RANDOM_NOTE", "REPORT", "write_outputs"]

RANDOM_NOTE = "random weights: the attributions describe an untrained model"
REPORT = "attribute.html"


def write_outputs(
    cmd: Command,
    opened: Loaded,
    state: AttributeState,
    records: Sequence[dict[str, Any]],
    settings: Mapping[str, Any],
    *,
    reused: int = 0,
) -> AttributeResult:
    """Summarize the axioms, warn about flagged ones, write ``attribute.json`` and the page;
    the result the command returns."""

    loaded, opts = state.loaded, state.opts
    methods = list(opts.methods)
    axioms = summarize(records, methods)
    for method in methods:
        said = warning(method, axioms[method], opts.settings.steps)
        if said is not None:
            cmd.warn(said)
    random = state.random
    ok = [r for r in records if r.get("status") == "ok"]
    record = {
        **cmd.head(opened),
        "command": "attribute",
        "random_weights": random,
        "random_note": RANDOM_NOTE if random else None,
        "methods": methods,
        "titles": {m: MAP_METHODS[m].title for m in methods},
        "signed": {m: MAP_METHODS[m].signed for m in methods},
        "target": opts.target,
        "settings": settings["settings"],
        "how": {m: state.records.get(m, {}) for m in methods},
        "reduced": (
            "the map of a signed method is the sum of its attributions over the input's "
            "channels; of the others, their largest magnitude over the channels"
        ),
        "batch_size": opts.execution.batch_size,
        "notes": list(state.notes),
        "axioms": axioms,
        "report": REPORT if opts.report and ok else None,
        "images": list(records),
        "skipped": [
            {"path": str(p), "reason": why} for p, why in (cmd.found.skipped if cmd.found else [])
        ],
        "warnings": list(cmd.warnings),
        "seconds": round(cmd.seconds(), 3),
    }
    path = opts.out / RECORD
    output.write_json(path, record)
    report = None
    if opts.report and ok:
        report = opts.out / REPORT
        output.write_bytes(report, attribute_page(record))
    return AttributeResult(
        out=opts.out,
        record=path,
        model=cmd.model,
        weights=loaded.weights,
        methods=methods,
        images=list(records),
        axioms=axioms,
        random_weights=random,
        seconds=cmd.seconds(),
        device=str(loaded.device),
        report=report,
        skipped=list(cmd.found.skipped if cmd.found else []),
        warnings=list(cmd.warnings),
        reused=reused,
        weights_warning=opened.warning,
    )
