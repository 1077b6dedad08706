"""``actviz atlas``: a layer's whole space over a folder on one map, as named steps.

open -> load (model B too with --against) -> the layer, read as maps -> the checks that need
no forward (enough points, channels, the colouring) -> the readout -> the forward part (points
taken in the hooks, parts of the resumable state as it goes) -> the layout (PCA on the device,
UMAP or the first two components; B's vectors mapped onto A's first) -> the cells -> icons
-> ``atlas.json``, ``points.parquet``, ``atlas.png``, ``atlas.html``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.atlas.colours import COLOURINGS, PointFacts, folder_class
from actviz.atlas.layout import lay_out
from actviz.atlas.options import AtlasOptions
from actviz.atlas.points import PointStore, per_image_rows
from actviz.atlas.readout import find_readout
from actviz.atlas.reduce import check_enough
from actviz.atlas.result import AtlasResult
from actviz.atlas.resume import JOURNAL, Earlier, Parts, load_earlier
from actviz.atlas.stream import Side, progress_of, stream
from actviz.atlas.write import earlier_files, write_outputs
from actviz.command import open_command
from actviz.command.opening import CommandSpec
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.errors import UsageError
from actviz.top_images.plan import plan_loaded

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["atlas"]

#: What the pictures of a model with random weights show, in the loud warning.
SHOWS = "The atlas shows"
_NOT_EMPTY = (
    "add --resume (resume=True in Python) to reuse an earlier atlas's points there, "
    "--overwrite (overwrite=True) to start again, or choose another --out"
)
#: ``atlas``'s keywords by the command line's names for them.
ALIASES = {"color": "colour"}
SPEC = CommandSpec("atlas", hint=_NOT_EMPTY)


def atlas(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: AtlasOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> AtlasResult:
    """Map one layer's whole space over a folder: every image (or ``K`` positions of every
    image) placed by a 2-D layout of its activation vector, the layout binned into cells,
    each cell shown by its nearest real images (or a feature visualization) and labelled with
    the class it supports, where the layer reaches a linear readout.

    Takes ``model``, ``inputs``, ``reporter`` and flat keywords as :func:`actviz.run` does,
    and :class:`~actviz.atlas.options.AtlasOptions` (``color=`` for ``colour``).

    Writes ``atlas.html``, ``atlas.png``, ``atlas.json``, ``points.parquet``,
    ``cell-means.npy`` and the resumable points under ``.actviz-atlas/``.

    Raises:
        ActvizError: For every expected failure (an unknown layer, a layer of one channel,
            fewer points than the layout needs, UMAP without its extra, a resume with other
            settings, ...); TypeError for an unknown keyword.
    """

    opts = from_flat(
        AtlasOptions, COMMON_GROUPS, keywords, caller="atlas", given=options, aliases=ALIASES
    )
    ex = opts.execution
    given_b = opts.against_model if opts.against_model is not None else model
    with open_command(
        model,
        opts.out,
        SPEC,
        ex,
        reporter=reporter,
        inputs=inputs,
        restore=[given_b] if opts.against_model is not None else [],
    ) as cmd:
        assert cmd.found is not None
        images = cmd.found.images
        rows_upper = len(images) * (opts.points.k if opts.points.kind == "spatial" else 1)
        check_enough(rows_upper, opts, f"{len(images)} image(s)")
        sides = _open_sides(cmd, opts, given_b, len(images))
        _check_before_forward(cmd, sides, opts, [i.rel.as_posix() for i in images])
        if ex.overwrite:
            output.remove_written(opts.out, earlier_files(opts.out))

        readout = find_readout(sides[0].loaded, sides[0].plan)
        rels = [item.rel.as_posix() for item in images]
        paths = [item.path for item in images]
        started = time.perf_counter()
        failed, reused = _forward(cmd, sides, paths, rels, opts)
        forward_seconds = time.perf_counter() - started

        laid = lay_out(sides, opts, readout, [item.rel for item in images], cmd.warn)

        return write_outputs(
            cmd,
            opts,
            sides,
            laid,
            readout,
            rels,
            paths,
            failed,
            reused=reused,
            forward_seconds=forward_seconds,
        )


def _open_sides(cmd: Command, opts: AtlasOptions, given_b: Any, images: int) -> list[Side]:
    """Model A (and B) loaded, each with its one layer planned."""
    opened_a = cmd.load(opts.load, shows=SHOWS)
    loaded_a = opened_a.model
    plan_a = _one_plan(cmd, loaded_a, str(opts.layer), opts, "--layer")
    sides = [_side(loaded_a, plan_a, opts, images, "A", opened_a.warning)]
    if not opts.compares:
        return sides
    opened_b = cmd.load(
        opts.load, shows=SHOWS, given=given_b, weights=opts.weights_b, flag="--against-weights"
    )
    loaded_b = opened_b.model
    if loaded_b.preprocess != loaded_a.preprocess:
        cmd.warn(
            f"{loaded_b.name} is fed with {loaded_a.name}'s preprocessing "
            f"({loaded_a.preprocess.crop_size[0]} x {loaded_a.preprocess.crop_size[1]}), not "
            "its own"
        )
    layer_b = opts.against_layer or str(opts.layer)
    plan_b = _one_plan(cmd, loaded_b, layer_b, opts, "--against-layer")
    if opts.points.kind == "spatial" and (plan_a.height, plan_a.width) != (
        plan_b.height,
        plan_b.width,
    ):
        raise UsageError(
            f"--points spatial pairs the same positions of both models, and {plan_a.key} "
            f"gives {plan_a.height} x {plan_a.width} maps where model B's {plan_b.key} gives "
            f"{plan_b.height} x {plan_b.width}; use --points pooled or layers of one map size"
        )
    sides.append(_side(loaded_b, plan_b, opts, images, "B", opened_b.warning))
    return sides


def _side(
    loaded: LoadedModel,
    plan: LayerPlan,
    opts: AtlasOptions,
    images: int,
    label: str,
    warning: str | None,
) -> Side:
    return Side(
        loaded=loaded,
        plan=plan,
        store=PointStore(images, per_image_rows(opts.points, plan)),
        predictions=np.full(images, -1, np.int64),
        label=label,
        warning=warning,
    )


def _one_plan(
    cmd: Command, loaded: LoadedModel, layer: str, opts: AtlasOptions, flag: str
) -> LayerPlan:
    """The plan of the one output ``layer`` names; refused unless there is one, of at least
    two channels."""

    _, names = cmd.select(loaded, layer)
    planned = plan_loaded(loaded, names, in_chans=opts.load.in_chans, model_name=loaded.name)
    plans = list(planned.plans.values())
    if len(plans) != 1:
        raise UsageError(
            f"atlas maps one layer; {flag} {layer} selects {len(plans)} ({planned.shown()}); "
            f"name one (actviz list-layers {loaded.name})"
        )
    plan = plans[0]
    if plan.channels < 2:
        raise UsageError(
            f"{plan.key} gives vectors of {plan.channels} channel: a map of its points would "
            "be a line; choose a layer with more channels"
        )
    return plan


def _check_before_forward(
    cmd: Command, sides: list[Side], opts: AtlasOptions, rels: list[str]
) -> None:
    """What can be refused before any image runs: too few points, the colouring."""

    a = sides[0]
    rows = len(rels) * a.store.per_image * len(sides)
    check_enough(rows, opts, f"{len(rels)} image(s) x {a.store.per_image} point(s)")
    if opts.colour is None:
        return
    facts = PointFacts(
        image=np.zeros(0, np.int32),
        side=np.zeros(0, np.int8),
        classes=[folder_class(PurePosixPath(r)) for r in rels],
        predictions=[s.predictions for s in sides],
        categories=a.loaded.categories,
        vectors=np.zeros((0, a.plan.channels), np.float32),
        classifier=a.loaded.classifier,
    )
    why = COLOURINGS[opts.colour.kind].refuse(facts, opts.colour)
    if why is not None:
        raise UsageError(why)


def _forward(
    cmd: Command, sides: list[Side], paths: list[Path], rels: list[str], opts: AtlasOptions
) -> tuple[dict[int, str], int]:
    """The forward part, resumed from an earlier run's parts with ``--resume``: the images
    that failed, and how many came from the earlier run."""

    settings = _settings(cmd, sides, opts)
    earlier = Earlier()
    if opts.execution.resume:
        if not (opts.out / JOURNAL).is_file() and _holds_files(opts.out):
            raise UsageError(
                f"{opts.out} holds no atlas to resume (no {JOURNAL}); use --overwrite to "
                "replace what is there, or another --out"
            )
        earlier = load_earlier(
            opts.out, settings, rels, [s.store for s in sides], [s.predictions for s in sides]
        )
    todo = [i for i, rel in enumerate(rels) if rel not in earlier.done]
    reused = len(rels) - len(todo)
    start_progress(
        cmd.notify,
        len(rels),
        [progress_of(paths[i], rels[i], None) for i, rel in enumerate(rels) if rel in earlier.done],
    )
    parts = Parts(
        opts.out,
        settings,
        [s.store for s in sides],
        [s.predictions for s in sides],
        rels,
        fresh=not earlier.parts,
        parts=earlier.parts,
    )
    try:
        streamed = stream(sides, paths, rels, todo, opts, parts, cmd.notify)
    finally:
        parts.close()
    return streamed.failed, reused


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(not p.name.startswith(output.TMP_MARK) for p in folder.iterdir())


def _settings(cmd: Command, sides: list[Side], opts: AtlasOptions) -> dict[str, Any]:
    """What a resumed forward must share with the earlier one."""
    return {
        "model": cmd.model,
        **opts.forward_settings(),
        "sides": [
            {
                "model": s.loaded.name,
                "weights": s.loaded.weights.name or s.loaded.weights.source,
                "layer": s.plan.key,
                "shape": list(s.plan.shape),
                "input_size": list(s.loaded.input_size),
            }
            for s in sides
        ],
    }
