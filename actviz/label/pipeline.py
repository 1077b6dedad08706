"""``actviz label``: what each unit of a layer detects, named from the user's own data.

open -> the concepts (refused before the model loads when nothing can be tested) -> load ->
the layers (or a dictionary's features) -> the first pass (one journal record a batch) ->
with masks, the thresholds and the second pass -> per layer every metric, the permutation
test and Benjamini-Hochberg -> the probes -> ``labels.json``, the pages and the charts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.command import open_command
from actviz.command.opening import RESUMABLE, CommandSpec
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.errors import UsageError
from actviz.label.analysis import testable_concepts
from actviz.label.clip import clip_concepts
from actviz.label.concepts import Concepts, folder_classes, read_tags
from actviz.label.ledger import LEDGER, line, read_ledger
from actviz.label.masks import MaskSet, TopValues, iou_grid, quantile_count, read_masks
from actviz.label.options import LabelOptions
from actviz.label.result import LabelResult
from actviz.label.stream import Gathered, Pass, first_pass, second_pass
from actviz.label.write import write_outputs
from actviz.results import ImageResult
from actviz.top_images.features import dictionary_layer, feature_plans
from actviz.top_images.plan import plan_loaded

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel

__all__ = ["label"]

SHOWS = "The labels describe"
SPEC = CommandSpec("label", hint=RESUMABLE)


def label(
    model: str | nn.Module,
    folder: Path | str,
    options: LabelOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> LabelResult:
    """Name what the units of a layer detect, from concepts the user has for a folder of
    images: tags, subfolders (classes), pixel masks, or a local CLIP model's words.

    Per unit and concept: AUPRC (by default; F1, Pearson correlation and, with masks, IoU
    beside it) and a permutation p-value, corrected by Benjamini-Hochberg over the layer's
    units and concepts; a unit with nothing significant is unlabelled. Per concept, how well
    a linear probe recovers it from the layer and from the pixels.

    Args:
        model: A model name, ``file.py:factory``, or an ``nn.Module``, as :func:`actviz.run`.
        folder: The folder of images.
        options, reporter, **keywords: As :func:`actviz.run` takes them, for
            :class:`~actviz.label.options.LabelOptions` (``tags=``, ``classes=True``,
            ``masks=``, ``layers=``, ``sae=``, ``metric=``, ...).

    Raises:
        ActvizError: For every expected failure; TypeError for an unknown keyword.
    """

    opts = from_flat(LabelOptions, COMMON_GROUPS, keywords, caller="label", given=options)
    root = _folder(folder)
    ex = opts.execution
    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=[root]) as cmd:
        assert cmd.found is not None
        images = cmd.found.images
        rels = [item.rel for item in images]
        paths = [item.path for item in images]
        concepts, masks = _concepts(cmd, opts, root, rels, paths)
        sheets_doc = _top_images(opts)
        opened = cmd.load(opts.load, shows=SHOWS)
        loaded = opened.model
        run, unit = _layers(cmd, loaded, opts, rels, paths)
        settings = _settings(cmd, loaded, run, opts, concepts, len(images))
        gathered = _gathered(run, concepts, masks, len(images), opts)
        resumed = False
        for record in read_ledger(opts.out, settings, resume=ex.resume):
            gathered.add(record)
            resumed = True
        reused = len(gathered.scores)
        _passes(cmd, run, gathered, paths, masks, settings, opts, resumed)

        return write_outputs(
            cmd,
            opened,
            run,
            gathered,
            concepts,
            opts,
            unit=unit,
            masks=masks,
            sheets_doc=sheets_doc,
            reused=reused,
        )


def _folder(folder: Path | str | Sequence[Path | str]) -> Path:
    """The one folder of images."""
    if isinstance(folder, str | Path):
        path = Path(folder)
    else:
        given = list(folder)
        if len(given) != 1:
            raise UsageError("label takes one folder of images (its subfolders are walked)")
        path = Path(given[0])
    if path.exists() and not path.is_dir():
        raise UsageError(f"label takes a folder of images, and {path} is a file")
    return path


def _concepts(
    cmd: Command, opts: LabelOptions, root: Path, rels: list[Any], paths: list[Path]
) -> tuple[Concepts, MaskSet | None]:
    """The concepts, and the masks when they come from masks; warned about names that are no
    image; refused when none can be tested (before the model loads)."""

    masks = None
    if opts.tags is not None:
        concepts = read_tags(opts.tags, rels, paths)
    elif opts.masks is not None:
        masks = read_masks(opts.masks, rels, paths)
        concepts = masks.concepts
    elif opts.classes:
        concepts = folder_classes(rels, root)
    else:
        concepts = clip_concepts(opts, paths)
    unmatched = concepts.describe_unmatched()
    if unmatched is not None:
        cmd.warn(unmatched)
    why = testable_concepts(concepts.labels, opts.min_positives)
    untested = [(name, reason) for name, reason in zip(concepts.names, why, strict=True) if reason]
    if len(untested) == len(concepts.names):
        shown = "; ".join(f"{name}: {reason}" for name, reason in untested[:3])
        raise UsageError(
            f"no concept has enough images to be tested ({shown}); label more images, or "
            "lower --min-positives"
        )
    for name, reason in untested:
        cmd.warn(f"concept {name!r} is not tested: {reason}")
    return concepts, masks


def _top_images(opts: LabelOptions) -> dict[str, Any] | None:
    """``--top-images``: the document of the top-images run whose sheets the labels link to.

    Raises:
        UsageError: When the folder holds no ``top-images.json``.
    """
    if opts.top_images is None:
        return None

    path = opts.top_images / "top-images.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UsageError(
            f"--top-images {opts.top_images} holds no readable top-images.json; run actviz "
            f"top-images MODEL FOLDER --layers LAYER --out {opts.top_images} first"
        ) from None
    return doc if isinstance(doc, dict) else None


def _layers(
    cmd: Command, loaded: LoadedModel, opts: LabelOptions, rels: list[Any], paths: list[Path]
) -> tuple[Pass, str]:
    """The layers' plans (a dictionary's features with ``--sae``), and the word for a unit."""

    transforms: dict[str, Any] = {}
    if opts.sae is not None:
        sae = cmd.dictionary(opts.sae, loaded, loaded.device)
        key, module_name = dictionary_layer(sae)
        _, names = cmd.select(loaded, opts.layers or module_name)
    else:
        _, names = cmd.deepest(loaded, opts.layers)
    planned = plan_loaded(loaded, names, in_chans=opts.load.in_chans, model_name=cmd.model)
    for name in planned.never_ran:
        cmd.warn(f"layer {name} was selected but never ran in the forward pass")
    if opts.sae is not None:
        transforms = feature_plans(planned, sae, key, opts.sae)
    if not planned.plans:
        reasons = "; ".join(f"{k}: {why}" for k, why in planned.skipped[:3]) or "none ran"
        raise UsageError(
            f"none of the selected layers has units to label ({reasons}); choose layers with "
            f"(C, H, W), token or vector outputs (actviz list-layers {cmd.model})"
        )
    for key, why in planned.skipped:
        cmd.warn(f"layer {key} is not labelled: {why}")
    run = Pass(
        loaded=loaded,
        modules=list(names),
        plans=dict(planned.plans),
        transforms=transforms,
        score=opts.score,
        execution=SPEC.execution(opts.execution),
        rels={str(p): r.as_posix() for p, r in zip(paths, rels, strict=True)},
        index={r.as_posix(): i for i, r in enumerate(rels)},
    )
    return run, "feature" if opts.sae is not None else "channel"


def _settings(
    cmd: Command,
    loaded: LoadedModel,
    run: Pass,
    opts: LabelOptions,
    concepts: Concepts,
    images: int,
) -> dict[str, Any]:
    """What a resumed run must share with the earlier one: what the journal's records hold
    depends on these, not on the tests run on them afterwards."""
    return {
        "model": cmd.model,
        "weights": loaded.weights.name or loaded.weights.source,
        "layers": {key: plan.channels for key, plan in run.plans.items()},
        "input_size": list(loaded.input_size),
        "concepts": list(concepts.names),
        **opts.settings(),
        # The quantile's kept values depend on how many images there are.
        "images": images if opts.masks is not None else None,
    }


def _gathered(
    run: Pass, concepts: Concepts, masks: MaskSet | None, images: int, opts: LabelOptions
) -> Gathered:
    units = {key: plan.channels for key, plan in run.plans.items()}
    gathered = Gathered(units=units, concepts=len(concepts.names))
    gathered.held = np.zeros(len(concepts.names), dtype=np.int64)
    if masks is not None:
        gathered.tops = {
            key: TopValues.empty(
                plan.channels, quantile_count(opts.quantile, images, plan.height * plan.width)
            )
            for key, plan in run.plans.items()
        }
    return gathered


def _passes(
    cmd: Command,
    run: Pass,
    gathered: Gathered,
    paths: list[Path],
    masks: MaskSet | None,
    settings: dict[str, Any],
    opts: LabelOptions,
    resumed: bool,
) -> None:
    """Both passes over what is left to do, every batch journaled as it ends."""

    done = [p for p in paths if run.rels[str(p)] in gathered.scores]
    todo = [p for p in paths if run.rels[str(p)] not in gathered.scores]
    total = len(paths) * (2 if masks is not None else 1)
    reused = [ImageResult(path=p, out_dir=PurePosixPath(run.rels[str(p)])) for p in done]
    if masks is not None:
        reused += [r for r in reused if run.rels[str(r.path)] in gathered.masked]
    start_progress(cmd.notify, total, reused)
    journal = output.Journal(opts.out / LEDGER, keep=None if resumed else 0)
    head = [] if resumed else [line({"settings": settings})]
    try:
        for record in first_pass(run, todo, cmd.notify, gathered.tops):
            gathered.add(record)
            for first in head:
                journal.append(first)
            head = []
            journal.append(line(record))
        if masks is not None and gathered.tops is not None and gathered.scores:
            thresholds = _thresholds(run, gathered, opts)
            grid = iou_grid(run.loaded.input_size)
            ok = [p for p in paths if run.rels[str(p)] in gathered.scores]
            left = [p for p in ok if run.rels[str(p)] not in gathered.masked]
            for record in second_pass(run, left, cmd.notify, masks, thresholds, grid):
                gathered.add(record)
                journal.append(line(record))
            gathered.thresholds = thresholds
        journal.sync()
    finally:
        journal.close()


def _thresholds(run: Pass, gathered: Gathered, opts: LabelOptions) -> dict[str, Any]:
    """Each layer's per-unit threshold: the value at its top ``quantile`` of all its map
    values over the images scored."""
    assert gathered.tops is not None
    scored = len(gathered.scores)
    return {
        key: gathered.tops[key].thresholds(
            quantile_count(opts.quantile, scored, plan.height * plan.width)
        )
        for key, plan in run.plans.items()
    }
