"""``actviz ablate``: knock units, dictionary features or a direction out of one layer and
measure what each class loses, over a folder, as named steps.

open -> load (families that make no sense refused) -> prepare (layer, labels, the model cut at
the layer, what is removed, the ablations) -> the reference pass (mean, resample) -> the main
pass, one journal line per image -> for a sweep, the ranking and the curve pass -> the tables,
``ablate.json``, ``ablate.parquet``, the pictures and the page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.ablate.options import AblateOptions
from actviz.ablate.passes import (
    Curves,
    References,
    curve_pass,
    main_pass,
    progress_of,
    reference_pass,
)
from actviz.ablate.prepare import State, describe_method, prepare
from actviz.ablate.result import AblateResult
from actviz.ablate.tables import curve_sizes, rank_split, ranking
from actviz.ablate.write import write_outputs
from actviz.command import open_command
from actviz.command.opening import CommandSpec
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.command.resume import check_settings
from actviz.errors import UsageError

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command

__all__ = ["LEDGER", "ablate"]

LEDGER = "ablate.jsonl"
_SHOWS = "The accuracies show"
_NOT_EMPTY = (
    "add --resume (resume=True in Python) to go on with it, --overwrite (overwrite=True) to "
    "start again, or choose another --out"
)
SPEC = CommandSpec("ablate", hint=_NOT_EMPTY)


def ablate(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: AblateOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> AblateResult:
    """Remove units, dictionary features or a direction from one layer of a classifier and
    measure, over a folder, what each class loses: accuracy and balanced accuracy before and
    after, the mean change of the class's logit, and which classes take the lost images.

    Args:
        model: A model name, ``file.py:factory``, or an ``nn.Module``, as :func:`actviz.run`.
        inputs: Image files and/or folders (class subfolders give the labels).
        options, reporter, **keywords: As :func:`actviz.run` takes them, for
            :class:`~actviz.ablate.options.AblateOptions` (``layer=``, ``units=``, ...).

    Raises:
        ActvizError: For every expected failure; TypeError for an unknown keyword.
    """

    opts = from_flat(AblateOptions, COMMON_GROUPS, keywords, caller="ablate", given=options)
    ex = opts.execution
    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=inputs) as cmd:
        assert cmd.found is not None
        opened = cmd.load(opts.load, shows=_SHOWS)
        loaded = opened.model
        if not loaded.classifier:
            raise UsageError(
                f"{loaded.name} is a backbone without a classifier: there are no class "
                "scores for ablate to measure; load a classifier"
            )
        state = prepare(cmd, loaded, opts)
        settings = _settings(cmd.model, state)
        if ex.overwrite:
            output.remove_written(opts.out, list(_OWN_FILES), trees=["cases"])
        done = _ledger(opts, settings)
        records, curves = _run(cmd, state, settings, done)

        return write_outputs(cmd, opened, state, records, curves, settings)


#: Files an earlier ablate wrote in its folder (``--overwrite`` removes them).
_OWN_FILES = (LEDGER, "ablate.json", "ablate.parquet", "ablate.html", "classes.png", "curves.png")


def _run(
    cmd: Command, state: State, settings: dict[str, Any], done: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The passes, each image's records appended to the journal as it is done."""
    opts = state.opts
    assert cmd.found is not None
    paths = [item.path for item in cmd.found.images]
    rels = [state.rels[str(p)] for p in paths]
    passes = 1 + (state.mode.needs is not None) + opts.each
    main_done = [done[r] for r in rels if r in done and "status" in done[r]]
    curve_done = [done["curve:" + r] for r in rels if "curve:" + r in done]
    # Each image goes through every pass: count passes, so 24 images read "of 48", not "48 images".
    start_progress(cmd.notify, passes * len(paths), unit="image passes" if passes > 1 else "images")
    refs: References | None = None
    if state.mode.needs is not None:
        refs = state.references = reference_pass(state, paths, cmd.notify)

    later = refs is not None
    for record in main_done + curve_done:
        cmd.notify.advance(progress_of(record, later=later))
    journal = output.Journal(opts.out / LEDGER, keep=None if done else 0)
    head = [] if done else [_line({"settings": settings})]
    try:

        def append(record: Mapping[str, Any]) -> None:
            nonlocal head
            for line in head:
                journal.append(line)
            head = []
            journal.append(_line(record))

        todo = [p for p, r in zip(paths, rels, strict=True) if r not in done]
        for record in main_pass(state, todo, refs, cmd.notify):
            done[record["image"]] = record
            append(record)
        records = [done[r] for r in rels if r in done]
        curves = None
        if opts.each and any(r.get("status") == "ok" for r in records):
            curves, measured = _curve_plan(state, records)
            classes = {r["image"]: int(r["label"]) for r in measured}
            todo_curves = [Path(r["path"]) for r in measured if "curve:" + r["image"] not in done]
            for record in curve_pass(state, todo_curves, classes, curves["plan"], refs, cmd.notify):
                done["curve:" + record["curve"]] = record
                append(record)
            curves["points"] = {
                r["image"]: done["curve:" + r["image"]]
                for r in measured
                if "curve:" + r["image"] in done
            }
            # The rest of the curve pass's count: its ranking images and the failed ones.
            for r in records:
                if r["image"] not in classes:
                    cmd.notify.advance(progress_of(r, later=True))
        journal.sync()
    finally:
        journal.close()
    return records, curves


def _curve_plan(
    state: State, records: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ranking split, each class's units ranked on its part, and the images measured."""

    ok = [r for r in records if r.get("status") == "ok"]
    labels = np.asarray([r["label"] for r in ok], dtype=np.int64)
    ranks = rank_split(labels, state.opts.rank_share, state.opts.seed)
    before = np.asarray([r["logit"] for r in ok], dtype=np.float64)
    after = np.asarray([r["logits"] for r in ok], dtype=np.float64).T.reshape(-1, len(ok))
    ranked = ranking(labels, before, after, ranks)
    measured = [r for r, rank in zip(ok, ranks, strict=True) if not rank and r["label"] in ranked]
    plan = Curves(
        {c: order.tolist() for c, (order, _) in ranked.items()}, curve_sizes(state.coords.count)
    )
    return {
        "plan": plan,
        "ranked": ranked,
        "rank_images": [r["image"] for r, rank in zip(ok, ranks, strict=True) if rank],
    }, measured


def _settings(model: str, state: State) -> dict[str, Any]:
    """What a resumed run must share with the earlier one."""
    opts, loaded = state.opts, state.loaded
    return {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "layer": state.layer,
        "input_size": list(loaded.input_size),
        "remove": state.coords.describe(),
        "ablations": state.ablations.names,
        "mode": state.mode.spec,
        "labels": state.labels.describe(),
        "seed": opts.seed,
        "rank_share": opts.rank_share if opts.each else None,
        "method": describe_method(state),
    }


def _ledger(opts: AblateOptions, settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """With ``--resume``: the records an earlier run with the same settings wrote (main
    records by image, curve records by ``curve:`` and image). A line cut short by a kill is
    left out; a folder holding files but no ablate is refused."""
    path = opts.out / LEDGER
    if not opts.execution.resume:
        return {}
    if not path.is_file():
        if any(not p.name.startswith(output.TMP_MARK) for p in opts.out.iterdir()):
            raise UsageError(
                f"{opts.out} holds no ablate to resume (no {LEDGER}); use --overwrite to "
                "replace what is there, or another --out"
            )
        return {}
    records: list[dict[str, Any]] = []
    with path.open("rb") as fh:
        for line in fh:
            if not output.whole(line):
                continue
            try:
                data = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # cut short by a kill, then ended by the run that resumed
            if isinstance(data, dict):
                records.append(data)
    if not records:
        return {}
    check_settings(opts.out, records[0].get("settings"), settings)
    done: dict[str, dict[str, Any]] = {}
    for r in records[1:]:
        if "curve" in r:
            done["curve:" + str(r["curve"])] = r
        elif r.get("status") == "ok" and "image" in r:
            done[str(r["image"])] = r
    return done


def _line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
