"""``actviz ablate``: knock units, dictionary features or a direction out of one layer and
measure what each class loses, over a folder, as named steps.

open -> load (families that make no sense refused) -> prepare (layer, labels, the model cut at
the layer, what is removed, the ablations) -> the reference pass (mean, resample) -> the main
pass, one journal line per image -> for a sweep, the ranking and the curve pass -> the tables,
``ablate.json``, ``ablate.parquet``, the pictures and the page.
"""

from __future__ import annotations

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
from actviz.command.ledger import ImageLedger, image_key
from actviz.command.opening import RESUMABLE, CommandSpec, require_classifier
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command

__all__ = ["LEDGER", "ablate"]

LEDGER = "ablate.jsonl"
_SHOWS = "The accuracies show"
SPEC = CommandSpec("ablate", hint=RESUMABLE)


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
        require_classifier(loaded, "there are no class scores for ablate to measure")
        state = prepare(cmd, loaded, opts)
        settings = _settings(cmd.model, state)
        if ex.overwrite:
            output.remove_written(opts.out, list(_OWN_FILES), trees=["cases"])
        ledger = ImageLedger(opts.out, LEDGER, command="ablate", settings=settings, key=_key)
        done = ledger.read(ex.resume)
        records, curves = _run(cmd, state, ledger, done)

        return write_outputs(cmd, opened, state, records, curves, settings)


#: Files an earlier ablate wrote in its folder (``--overwrite`` removes them).
_OWN_FILES = (LEDGER, "ablate.json", "ablate.parquet", "ablate.html", "classes.png", "curves.png")


def _run(
    cmd: Command, state: State, ledger: ImageLedger, done: dict[str, dict[str, Any]]
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
    try:
        todo = [p for p, r in zip(paths, rels, strict=True) if r not in done]
        for record in main_pass(state, todo, refs, cmd.notify):
            done[record["image"]] = record
            ledger.append(record)
        records = [done[r] for r in rels if r in done]
        curves = None
        if opts.each and any(r.get("status") == "ok" for r in records):
            curves, measured = _curve_plan(state, records)
            classes = {r["image"]: int(r["label"]) for r in measured}
            todo_curves = [Path(r["path"]) for r in measured if "curve:" + r["image"] not in done]
            for record in curve_pass(state, todo_curves, classes, curves["plan"], refs, cmd.notify):
                done["curve:" + record["curve"]] = record
                ledger.append(record)
            curves["points"] = {
                r["image"]: done["curve:" + r["image"]]
                for r in measured
                if "curve:" + r["image"] in done
            }
            # The rest of the curve pass's count: its ranking images and the failed ones.
            for r in records:
                if r["image"] not in classes:
                    cmd.notify.advance(progress_of(r, later=True))
    finally:
        ledger.close()
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


def _key(record: Mapping[str, Any]) -> str | None:
    """A record's key among those read back: a curve record's ``curve:`` and its image, a
    main record's image when it was measured (a failed one is done again)."""
    if "curve" in record:
        return "curve:" + str(record["curve"])
    return image_key(record)
