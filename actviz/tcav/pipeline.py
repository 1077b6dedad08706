"""``actviz tcav``: does a concept move a class? TCAV with FastCAV, over runs, tested.

open -> the image sets (concepts, random, each class's inputs; refused when too small) ->
load (a classifier with gradients) -> the one layer -> the classes -> per set, every batch's
activations or gradients (one journal record a batch) -> per run, each concept's vector
against a random draw and a random-vs-random vector -> the TCAV scores, the two-sided test,
Benjamini-Hochberg -> ``tcav.json``, the vectors, the chart and the page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command import input_paths, open_command
from actviz.command.opening import RESUMABLE, CommandSpec, one_layer
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter, start_progress
from actviz.errors import UsageError
from actviz.gradients.core import resolve_targets
from actviz.io.images import discover
from actviz.label.ledger import decode, encode, line, read_ledger
from actviz.results import ImageResult
from actviz.tcav.options import TcavOptions
from actviz.tcav.result import TcavResult
from actviz.tcav.vectors import Layer, activations, gradients
from actviz.tcav.write import write_outputs
from actviz.top_images.plan import plan_loaded

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel

__all__ = ["LEDGER", "MIN_CONCEPT", "tcav"]

LEDGER = "tcav.jsonl"
SHOWS = "The TCAV scores describe"
#: The fewest images of a concept; random images need twice as many as a run draws.
MIN_CONCEPT = 5
SPEC = CommandSpec("tcav", hint=RESUMABLE)

Sets = dict[str, list[Path]]


def tcav(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str | None = None,
    options: TcavOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> TcavResult:
    """Test whether concepts move a class's score: for each concept, ``runs`` concept
    activation vectors against random draws (FastCAV by default), the TCAV score of each for
    each class (the share of the class's images whose score rises along it), against as many
    random-vs-random vectors, with a two-sided test; the vectors saved for ``ablate
    --direction``.

    Args:
        model: A model name, ``file.py:factory``, or an ``nn.Module`` (a classifier).
        inputs: Images of the classes whose ``targets`` give no folder of their own.
        options, reporter, **keywords: As :func:`actviz.run` takes them, for
            :class:`~actviz.tcav.options.TcavOptions` (``concepts={"striped": "dir"}``,
            ``random=["r0", "r1"]``, ``targets=["zebra"]``, ``layers=``, ``cav=``, ...).

    Raises:
        ActvizError: For every expected failure; TypeError for an unknown keyword.
    """

    opts = from_flat(TcavOptions, COMMON_GROUPS, keywords, caller="tcav", given=options)
    given = [] if inputs is None else input_paths(inputs)
    sets, folders = _sets(opts, given)
    ex = opts.execution
    with open_command(model, opts.out, SPEC, ex, reporter=reporter) as cmd:
        opened = cmd.load(opts.load, shows=SHOWS, check=_check_model)
        loaded = opened.model
        layer = _layer(cmd, loaded, opts)
        targets = _targets(loaded, opts)
        settings = {
            "model": cmd.model,
            "weights": loaded.weights.name or loaded.weights.source,
            "layer": layer.plan.key,
            "input_size": list(loaded.input_size),
            "targets": [index for index, _ in targets],
        }
        gathered: dict[str, dict[str, Any]] = {key: {} for key in _jobs(sets, targets)}
        failed: dict[str, dict[str, Any]] = {}
        resumed = False
        for record in read_ledger(
            opts.out,
            settings,
            resume=ex.resume,
            name=LEDGER,
            what="tcav",
        ):
            _add(gathered, failed, record, layer.plan.channels)
            resumed = True
        reused = sum(len(v) for v in gathered.values())
        _stream(cmd, layer, sets, targets, gathered, failed, settings, opts, resumed)

        return write_outputs(
            cmd, opened, layer, opts, sets, folders, targets, gathered, failed, reused=reused
        )


def _check_model(loaded: LoadedModel) -> None:
    """TCAV needs class scores and their gradients."""
    if not loaded.classifier:
        raise UsageError(
            f"{loaded.name} gives no class scores: TCAV tests a concept for a class; load a "
            "classifier"
        )
    why = getattr(loaded.family, "gradients", None)
    if isinstance(why, str):
        raise UsageError(f"tcav needs the gradients of {loaded.name}'s class scores: {why}")


def _sets(opts: TcavOptions, given: list[Path]) -> tuple[Sets, dict[str, list[str]]]:
    """Each image set by key (``concept:NAME``, ``random``, ``class:CLASS``) and its folders.

    Raises:
        UsageError: For a folder without images, a concept with fewer than
            :data:`MIN_CONCEPT` images, too few random images, or a class without images.
    """

    def found(paths: list[Path], what: str) -> list[Path]:
        for path in paths:
            if not path.exists():
                raise UsageError(f"{what}: {path}: no such file or folder")
        images = discover(paths).require(paths).images
        return sorted(item.path for item in images)

    sets: Sets = {}
    folders: dict[str, list[str]] = {}
    for name, folder in opts.concepts:
        assert folder is not None
        sets[f"concept:{name}"] = found([folder], f"--concept {name}")
        folders[f"concept:{name}"] = [str(folder)]
        count = len(sets[f"concept:{name}"])
        if count < max(MIN_CONCEPT, opts.per_run):
            need = f"--per-run {opts.per_run}" if opts.per_run > MIN_CONCEPT else "a concept vector"
            raise UsageError(
                f"--concept {name} has {count} image(s) in {folder}; {need} needs at least "
                f"{max(MIN_CONCEPT, opts.per_run)}"
            )
    sets["random"] = found(list(opts.random), "--random")
    folders["random"] = [str(p) for p in opts.random]
    least = 2 * max(MIN_CONCEPT, opts.per_run or MIN_CONCEPT)
    if len(sets["random"]) < least:
        raise UsageError(
            f"--random holds {len(sets['random'])} image(s); each run draws two disjoint random "
            f"sets, so at least {least} are needed (more give steadier scores)"
        )
    for target, folder in opts.targets:
        paths = [folder] if folder is not None else given
        if not paths:
            raise UsageError(
                f"--target {target} has no images: give its folder (--target {target}=DIR) or "
                "the class's images as INPUTS"
            )
        sets[f"class:{target}"] = found(paths, f"--target {target}")
        folders[f"class:{target}"] = [str(p) for p in paths]
    return sets, folders


def _layer(cmd: Command, loaded: LoadedModel, opts: TcavOptions) -> Layer:
    """The one layer, and its plan."""

    _, names = cmd.deepest(loaded, opts.layers)
    one_layer(names, opts.layers, doing="tcav's vectors live in one layer", option="--layer")
    planned = plan_loaded(loaded, names, in_chans=opts.load.in_chans, model_name=cmd.model)
    if not planned.plans:
        why = planned.skipped[0][1] if planned.skipped else "it never ran"
        raise UsageError(f"layer {names[0]} cannot hold concept vectors: {why}")
    plans = list(planned.plans.values())
    if len(plans) > 1:
        cmd.warn(
            f"layer {names[0]} gives {len(plans)} outputs ({', '.join(p.key for p in plans[:3])}); "
            f"the vectors live in the first, {plans[0].key}"
        )
    ex = opts.execution
    return Layer(loaded, names[0], plans[0], ex.batch_size, ex.workers)


def _targets(loaded: LoadedModel, opts: TcavOptions) -> list[tuple[int, str]]:
    """Each class as ``(index, the name given)``, checked against the model's classes on one
    forward of zeros, before anything is written.

    Raises:
        UsageError: For a class the model does not have.
    """
    import torch

    zeros = torch.zeros((1, loaded.preprocess.channels, *loaded.input_size), device=loaded.device)
    with torch.inference_mode():
        logits = loaded.family.call(loaded.module, zeros)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise UsageError(f"{loaded.name} gives no (batch, classes) scores to test a class of")
    found = []
    for name, _ in opts.targets:
        if name.strip().lower() == "top1":
            raise UsageError("--target takes a class (an index or a class name), not top1")
        try:
            found.append((resolve_targets(logits.float(), name, loaded.categories)[0], name))
        except UsageError as exc:  # the same checks as --target elsewhere, without top1
            raise UsageError(str(exc).replace(" or top1", "")) from None
    return found


def _jobs(sets: Sets, targets: list[tuple[int, str]]) -> list[str]:
    """The journal's set keys: activations of each concept and of the random images, then the
    gradients of each class."""
    keys = [key for key in sets if not key.startswith("class:")]
    return keys + [f"gradient:{index}" for index, _ in targets]


def _add(
    gathered: dict[str, dict[str, Any]],
    failed: dict[str, dict[str, Any]],
    record: dict[str, Any],
    channels: int,
) -> None:
    key = str(record.get("set"))
    if key not in gathered:
        return
    names = [str(n) for n in record.get("images") or []]
    vectors = decode(record["vectors"], "float32", (len(names), channels)) if names else None
    for i, name in enumerate(names):
        gathered[key][name] = vectors[i] if vectors is not None else None
        failed.pop(f"{key}|{name}", None)
    for item in record.get("failed") or []:
        failed[f"{key}|{item['path']}"] = {**item, "set": key}


def _stream(
    cmd: Command,
    layer: Layer,
    sets: Sets,
    targets: list[tuple[int, str]],
    gathered: dict[str, dict[str, Any]],
    failed: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    opts: TcavOptions,
    resumed: bool,
) -> None:
    """Every set's vectors not yet gathered, one journal record a batch."""
    work: list[tuple[str, list[Path], Callable[..., Iterator[Any]]]] = []
    for key in sets:
        if not key.startswith("class:"):
            work.append((key, sets[key], activations))
    by_name = {name: index for index, name in targets}
    for name, _ in opts.targets:
        index = by_name[name]

        def grad(layer: Layer, paths: Sequence[Path], failed: Any, index: int = index) -> Any:
            return gradients(layer, paths, index, failed)

        work.append((f"gradient:{index}", sets[f"class:{name}"], grad))
    total = sum(len(paths) for _, paths, _ in work)
    done = [_result(name) for key, _, _ in work for name in gathered[key]]
    start_progress(cmd.notify, total, done)
    journal = output.Journal(opts.out / LEDGER, keep=None if resumed else 0)
    head = [] if resumed else [line({"settings": settings})]
    try:
        for key, paths, produce in work:
            todo = [p for p in paths if str(p) not in gathered[key]]
            bad: list[dict[str, Any]] = []

            def on_failure(
                index: int, error: str, todo: list[Path] = todo, bad: list[Any] = bad
            ) -> None:
                bad.append({"path": str(todo[index]), "error": error})

            for indices, vectors in produce(layer, todo, on_failure):
                record = {
                    "set": key,
                    "images": [str(todo[i]) for i in indices],
                    "vectors": encode(vectors, "float32"),
                    "failed": list(bad),
                }
                _add(gathered, failed, record, layer.plan.channels)
                for first in head:
                    journal.append(first)
                head = []
                journal.append(line(record))
                for item in bad:
                    cmd.notify.advance(_result(item["path"], item["error"]))
                for i in indices:
                    cmd.notify.advance(_result(str(todo[i])))
                bad.clear()
            if bad:
                record = {"set": key, "images": [], "failed": list(bad)}
                _add(gathered, failed, record, layer.plan.channels)
                journal.append(line(record))
                for item in bad:
                    cmd.notify.advance(_result(item["path"], item["error"]))
        journal.sync()
    finally:
        journal.close()


def _rel(name: str) -> Any:

    return PurePosixPath(Path(name).name)


def _result(path: str, error: str | None = None) -> ImageResult:
    result = ImageResult(path=Path(path), out_dir=_rel(path))
    result.status = "failed" if error is not None else "ok"
    result.error = error
    return result
