"""``sae``: load -> plan the layer -> stream its vectors into the dictionaries, epoch after
epoch -> measure on the held-out images -> write ``sae.safetensors``, ``sae.json`` and the
feature pages.

Nothing but a bounded shuffle buffer of vectors is ever held: each epoch runs the training
images through the model again. The state is saved every few seconds and when the run is
interrupted, so Ctrl-C leaves a usable dictionary and ``--resume`` continues.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command import open_command
from actviz.command.forward import BatchForward
from actviz.command.opening import CommandSpec
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter
from actviz.errors import UsageError
from actviz.hooks import eval_mode
from actviz.sae.metrics import Quality
from actviz.sae.options import SaeOptions, Sizes
from actviz.sae.pages import feature_pages
from actviz.sae.result import SaeProgress, SaeResult
from actviz.sae.session import Run
from actviz.sae.state import STATE_FILE, read_state
from actviz.sae.tokens import SpliceSession, TokenRecorder
from actviz.sae.train import ShuffleBuffer
from actviz.sae.write import FILE, JSON_FILE, write_dictionaries, write_state
from actviz.top_images.plan import plan_loaded

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["sae"]

SPEC = CommandSpec("sae", forced={"amp": False, "channels_last": False})

#: Seconds between two saves of the training state while training runs.
SAVE_EVERY = 30.0


def sae(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: SaeOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> SaeResult:
    """Train a TopK sparse autoencoder on one layer's activation vectors over a folder.

    The vectors (one per spatial position of a map, per patch token of a ViT, per image of a
    vector) stream from the model's forward passes into a bounded shuffle buffer on the
    model's device; each epoch runs the training images again. The held-out share of the
    images measures the result: the fraction of variance explained, L0, dead and dense
    features, and how often the model's top-1 changes with the layer replaced by its
    reconstruction. Writes ``sae.safetensors`` (read with :func:`actviz.load_dictionary`),
    ``sae.json`` and, unless ``pages=False``, a page per feature.

    Takes ``model``, ``inputs``, ``reporter`` and flat keywords as :func:`actviz.run` does,
    and :class:`~actviz.sae.options.SaeOptions`.

    Raises:
        ActvizError: For every expected failure (unknown layer, a layer of one channel, k not
            below the features, a resume with other settings, ...).
    """

    opts = from_flat(SaeOptions, COMMON_GROUPS, keywords, caller="sae", given=options)
    ex = opts.execution
    if ex.engine != "local":
        raise UsageError("actviz sae trains in this process: drop --engine ray")
    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=inputs) as cmd:
        assert cmd.found is not None
        opened = cmd.load(opts.load, shows="The features show")
        loaded = opened.model
        plan = _one_plan(cmd, loaded, opts)
        paths = [item.path for item in cmd.found.images]
        train, held = split(paths, opts.held_out, opts.seed)
        per_epoch = plan.height * plan.width * len(train)
        sizes = opts.sizes(plan.channels, per_epoch)
        _check_sizes(plan, sizes)
        if sizes.dense is not None:
            cmd.warn(sizes.dense)
        if 0 < len(held) < FEW_HELD_OUT:
            cmd.warn(
                f"only {len(held)} held-out image(s) of {len(paths)}: the quality figures "
                "(variance explained, dead and dense shares) rest on them alone; a larger "
                "folder or --held-out steadies them"
            )
        settings = _settings(cmd, loaded, plan, train, opts)
        if ex.overwrite:
            _remove_outputs(opts.out)
        schedule = opts.schedule(per_epoch)
        run = Run(opts, plan, sizes, loaded.device, settings, schedule)
        if ex.resume:
            run.resume(read_state(opts.out, settings, loaded.device))
        started = time.perf_counter()
        try:
            _train(cmd, loaded, plan, train, run)
        finally:
            # Ctrl-C, a failure or the end: the state and a usable dictionary are on disk.
            run.position.seconds += time.perf_counter() - started
            if run.saes is not None:
                write_state(opts.out, run)
                if not run.finished():
                    write_dictionaries(opts.out, run, cmd, opened, plan, None, complete=False)
        if run.saes is None:
            raise UsageError(f"no image gave {plan.key} a vector to train on; see the messages")
        quality = _evaluate(cmd, loaded, plan, held or train, run)
        stable = run.stability()
        doc = write_dictionaries(
            opts.out, run, cmd, opened, plan, quality, complete=True, held_out=len(held)
        )
        pages = None
        if opts.pages:
            pages = feature_pages(model, cmd, loaded, plan, run, doc, inputs, paths)
        return _result(cmd, loaded, plan, run, doc, pages, run.trained_images, len(held), stable)


#: Below this many held-out images, the quality figures are said to rest on few.
FEW_HELD_OUT = 5


def _settings(
    cmd: Command, loaded: LoadedModel, plan: LayerPlan, train: list[Path], opts: SaeOptions
) -> dict[str, Any]:
    """What ``--resume`` must find unchanged: the model, the layer, the training images (as
    their count and a digest of their paths) and the options that shape the training."""
    digest = hashlib.sha256("\n".join(str(p) for p in train).encode("utf-8", "backslashreplace"))
    return {
        "model": cmd.model,
        "weights": loaded.weights.name or loaded.weights.source,
        "layer": plan.key,
        "input_size": list(loaded.input_size),
        "images": len(train),
        "images_sha256": digest.hexdigest(),
        **opts.settings(),
    }


def _result(
    cmd: Command,
    loaded: LoadedModel,
    plan: LayerPlan,
    run: Run,
    doc: dict[str, Any],
    pages: Path | None,
    images: int,
    held_out: int,
    stable: tuple[Any, list[float]] | None,
) -> SaeResult:
    opts = run.opts
    return SaeResult(
        model=cmd.model,
        layer=plan.key,
        out=opts.out,
        file=opts.out / FILE,
        json=opts.out / JSON_FILE,
        index=pages,
        channels=plan.channels,
        features=run.features,
        k=run.k,
        seeds=opts.seeds,
        images=images,
        held_out=held_out,
        steps=run.position.steps,
        tokens=run.position.tokens,
        epochs=run.position.epoch,
        train_seconds=run.position.seconds,
        quality=doc["metrics"],
        stability=stable[1] if stable is not None else None,
        device=str(loaded.device),
        weights=loaded.weights,
        warnings=cmd.warnings,
        failed=run.failed,
        seconds=cmd.seconds(),
        document=doc,
    )


def split(paths: Sequence[Path], share: float, seed: int) -> tuple[list[Path], list[Path]]:
    """Training and held-out images: each image's side decided by a hash of its path and the
    seed (so adding images never moves another), at least one of each when ``share`` > 0."""
    if share <= 0 or len(paths) < 2:
        return list(paths), []

    def draw(path: Path) -> float:
        digest = hashlib.sha256(f"{seed}:{path}".encode("utf-8", "backslashreplace")).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    draws = [draw(p) for p in paths]
    held = [p for p, d in zip(paths, draws, strict=True) if d < share]
    if not held:
        held = [paths[min(range(len(paths)), key=draws.__getitem__)]]
    if len(held) == len(paths):
        held = held[:-1]
    kept = set(held)
    return [p for p in paths if p not in kept], held


def _one_plan(cmd: Command, loaded: LoadedModel, opts: SaeOptions) -> LayerPlan:
    """The plan of the one selected output (its vectors); refused unless there is one."""

    _selector, names = cmd.deepest(loaded, opts.layers)
    planned = plan_loaded(loaded, names, in_chans=opts.load.in_chans, model_name=cmd.model)
    plans = list(planned.plans.values())
    if len(plans) != 1:
        raise UsageError(
            f"actviz sae trains on one layer; --layers selected {len(plans)} "
            f"({planned.shown()}); name one (actviz list-layers {cmd.model})"
        )
    return plans[0]


def _check_sizes(plan: LayerPlan, sizes: Sizes) -> None:
    if plan.channels < 2:
        raise UsageError(
            f"{plan.key} gives vectors of {plan.channels} channel(s): a dictionary needs at "
            f"least 2; choose a layer with more channels"
        )
    if sizes.k >= sizes.features:
        raise UsageError(
            f"--k {sizes.k} must be below the number of features ({sizes.features}); lower "
            "--k or raise --features/--expansion"
        )


def _epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    import torch

    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return [int(i) for i in torch.randperm(count, generator=generator).tolist()]


def _train(cmd: Command, loaded: LoadedModel, plan: LayerPlan, train: list[Path], run: Run) -> None:
    """The epochs: each runs the training images (in its own order) through the model, their
    vectors through the shuffle buffer into the dictionaries. When one whole epoch's vectors
    fit in a second buffer of the same bound, the next epochs reshuffle those instead of
    running the model again."""

    opts, notify = run.opts, cmd.notify
    notify.start(run.schedule.passes * len(train))
    for _ in range(run.position.epoch * len(train) + run.position.done):
        notify.advance(None)
    capacity = max(min(opts.buffer, (512 << 20) // (4 * plan.channels)), 2 * run.schedule.batch)
    held: Any = None
    with (
        TokenRecorder(loaded.module, plan, prefix=opts.prefix_tokens) as recorder,
        eval_mode(loaded.module),
    ):
        while not run.finished():
            position = run.position
            if held is not None:
                _epoch_from_memory(held, len(train), capacity, run, notify)
            else:
                held = _epoch_from_model(cmd, loaded, plan, train, run, recorder, capacity)
            if run.saes is None:
                return
            position.history.append({"epoch": position.epoch, "fve": _rounded(run.pass_fve())})
            position.epoch += 1
            position.done = 0


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _epoch_from_model(
    cmd: Command,
    loaded: LoadedModel,
    plan: LayerPlan,
    train: list[Path],
    run: Run,
    recorder: Any,
    capacity: int,
) -> Any:
    """One epoch (or its rest, after a resume) through the model; its vectors, when the whole
    epoch ran and they fit in ``capacity``, else None."""
    import torch

    opts, position, notify = run.opts, run.position, cmd.notify
    forward = BatchForward(loaded, loaded.module, cmd.execution)
    order = _epoch_order(len(train), opts.seed, position.epoch)
    todo = [train[i] for i in order][position.done :]
    buffer = ShuffleBuffer(capacity, plan.channels, loaded.device, seed=opts.seed + position.epoch)
    kept: list[Any] | None = [] if position.done == 0 else None
    count = 0

    def failed(index: int, error: str | None) -> None:
        if any(path == todo[index] for path, _ in run.failed):
            return  # each epoch reads the images again: named once
        run.failed.append((todo[index], error or "unreadable"))
        cmd.warn(f"{todo[index]}: {error}")

    with contextlib.ExitStack() as stack:
        for good, _logits, _x in forward.batches(todo, stack, failed):
            found = recorder.take()
            if found is None:
                for index, _, _ in good:
                    failed(index, f"{plan.key} gave {recorder.unfit}, not {plan.shape}")
            else:
                count += found.shape[0]
                if kept is not None and count <= capacity:
                    kept.append(found)
                else:
                    kept = None
                for chunk in buffer.add(found):
                    run.feed(chunk)
            position.done += len(good)
            for _ in good:
                notify.advance(SaeProgress(position.epoch, position.running_fve))
            if time.monotonic() - run.saved > SAVE_EVERY and run.saes is not None:
                write_state(run.opts.out, run)
            if run.finished():
                kept = None
                break
    for chunk in buffer.drain():
        run.feed(chunk)
    return torch.cat(kept) if kept else None


def _epoch_from_memory(held: Any, images: int, capacity: int, run: Run, notify: Reporter) -> None:
    """One more epoch over vectors held from the last one, in a new order, half a buffer at a
    time (as the shuffle buffer hands them out); progress still counted in images."""
    import torch

    position = run.position
    generator = torch.Generator().manual_seed(run.opts.seed * 100_003 + position.epoch)
    order = torch.randperm(held.shape[0], generator=generator).to(held.device)
    step = max(capacity // 2, 1)
    chunks = max(-(-held.shape[0] // step), 1)
    shown = 0
    for i in range(chunks):
        run.feed(held[order[i * step : (i + 1) * step]])
        reached = (i + 1) * images // chunks
        for _ in range(reached - shown):
            notify.advance(SaeProgress(position.epoch, position.running_fve))
        shown = reached
        if run.finished():
            return
    position.done = images


def _evaluate(
    cmd: Command, loaded: LoadedModel, plan: LayerPlan, paths: list[Path], run: Run
) -> list[Quality]:
    """One pass over the held-out images: every dictionary's quality, and the first one's
    spliced into the model (the top-1 with and without)."""
    import torch

    assert run.saes is not None
    qualities = [Quality() for _ in run.saes]
    forward = BatchForward(loaded, loaded.module, cmd.execution)
    module = loaded.module
    with (
        TokenRecorder(module, plan, prefix=run.opts.prefix_tokens) as recorder,
        eval_mode(module),
        contextlib.ExitStack() as stack,
    ):
        for good, logits, x in forward.batches(paths, stack):
            found = recorder.take()
            if found is None:
                continue
            for sae, quality in zip(run.saes, qualities, strict=True):
                quality.add(sae, found)
            classes = isinstance(logits, torch.Tensor) and logits.ndim == 2 and len(good) > 0
            if loaded.classifier and classes and logits.shape[0] == len(good):
                with SpliceSession(module, plan, run.saes[0]) as splice, torch.inference_mode():
                    after = module(x)
                if splice.spliced:
                    qualities[0].predictions(logits.float(), after.float())
    return qualities


def _remove_outputs(out: Path) -> None:
    """``--overwrite``: what an earlier sae run wrote, and nothing else."""

    seeds = [p.name for p in out.glob("sae-seed*.safetensors")] if out.is_dir() else []
    output.remove_written(
        out, [FILE, JSON_FILE, STATE_FILE, "sae.html", *seeds], trees=["sae-features"]
    )
