"""``actviz cam-eval``: how faithful each CAM method's maps are, over a folder, as named steps.

open -> load -> the layer -> the re-initialised twins -> per batch (maps, baselines, every
perturbed image through the model in chunks, the twins' maps) one journal line per image ->
the summary, ``cam-eval.json``, the chart, the best and worst cases and the page.
"""

from __future__ import annotations

import copy
import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.cam_eval.maps import (
    attribution_job,
    attribution_settings,
    last_blocks,
    layer_shape,
    method_maps,
    random_grid,
    randomized,
    recorded,
)
from actviz.cam_eval.metrics import (
    Protocol,
    baseline_maps,
    confidence_change,
    perturbation_curves,
    spearman,
)
from actviz.cam_eval.options import CamEvalOptions
from actviz.cam_eval.result import CamEvalResult, EvalState
from actviz.cam_eval.write import write_outputs
from actviz.command import open_command
from actviz.command.ledger import ImageLedger
from actviz.command.opening import CommandSpec, one_layer, require_classifier
from actviz.command.options import COMMON_GROUPS, from_flat
from actviz.command.progress import Reporter
from actviz.command.records import image_progress, ledger_pass
from actviz.gradients.batch import patches_reach_readout
from actviz.gradients.core import resolve_targets
from actviz.gradients.methods import forward_chunk
from actviz.layouts import layer_contexts
from actviz.results import ImageResult

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.models import LoadedModel

__all__ = ["CamEvalResult", "cam_eval"]

LEDGER = "cam-eval.jsonl"
_SHOWS = "The maps and scores show"
_NOT_EMPTY = "add --resume to go on with it, --overwrite to start again, or choose another --out"
SPEC = CommandSpec("cam-eval", hint=_NOT_EMPTY, forced={"amp": False})


def cam_eval(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: CamEvalOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> CamEvalResult:
    """Score CAM methods on a classifier over images: deletion and insertion curves and their
    areas, the change in confidence on the map-masked image, the same for the random, Gaussian
    and Sobel baselines, and the cascading-randomization sanity check.

    Args:
        model: A model name, ``file.py:factory``, or an ``nn.Module``, as :func:`actviz.run`.
        inputs: Image files and/or folders.
        options, reporter, **keywords: As :func:`actviz.run` takes them, for
            :class:`~actviz.cam_eval.options.CamEvalOptions`.

    Raises:
        ActvizError: For every expected failure; TypeError for an unknown keyword.
    """

    opts = from_flat(CamEvalOptions, COMMON_GROUPS, keywords, caller="cam_eval", given=options)
    ex = opts.execution
    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=inputs) as cmd:
        assert cmd.found is not None
        opened = cmd.load(opts.load, shows=_SHOWS)
        loaded = opened.model
        require_classifier(loaded, "there is no class score for cam-eval to measure")
        layer = _layer(cmd, loaded, opts)
        state = _prepare(loaded, layer, opts, cmd)
        state.rels = {str(item.path): item.rel.as_posix() for item in cmd.found.images}
        settings = _settings(cmd.model, loaded, state)
        ledger = ImageLedger(opts.out, LEDGER, command="cam-eval", settings=settings)
        score = functools.partial(_score_batch, state)
        records, reused = ledger_pass(cmd, loaded, ledger, state.rels, _progress, score)

        return write_outputs(cmd, opened, state, records, settings, reused=reused)


def _layer(cmd: Any, loaded: LoadedModel, opts: CamEvalOptions) -> str:
    """The one layer: ``--layers`` (one module), else the layer ``run --cam`` takes."""
    if opts.layers is not None:
        _, names = cmd.select(loaded, opts.layers)
        doing = "cam-eval scores the maps of one layer"
        return one_layer(names, opts.layers, doing=doing, option="--layers")

    _, names = cmd.select(loaded, None)
    contexts = layer_contexts(loaded.module, loaded.input_size)
    reaching = [n for n in names if patches_reach_readout(n, contexts)]
    return str((reaching or names)[-1])


def _prepare(loaded: LoadedModel, layer: str, opts: CamEvalOptions, cmd: Any) -> EvalState:
    """The layer's layout, the protocol, and the twins of the sanity check."""

    contexts = layer_contexts(loaded.module, loaded.input_size)
    blocks = last_blocks(loaded.module, opts.sanity_blocks)
    if opts.sanity_blocks and len(blocks) < opts.sanity_blocks:
        cmd.warn(f"the sanity check re-initialises {len(blocks)} blocks: the model has no more")
    twins = [randomized(loaded.module, blocks[: j + 1], opts.seed + j) for j in range(len(blocks))]
    return EvalState(
        job=attribution_job(loaded, opts),
        opts=opts,
        loaded=loaded,
        layer=layer,
        shape=layer_shape(contexts, layer),
        protocol=Protocol(steps=opts.steps, seed=opts.seed),
        stages=blocks,
        twins=twins,
        rels={},
        **_scorer(loaded.module, loaded.device.type, opts.execution.channels_last),
    )


def _scoring_chunk(opts: CamEvalOptions, device: str, size: tuple[int, int]) -> int:
    """Perturbed (or Score-CAM's masked) images per forward: ``--chunk``; else on a CPU
    about 400k pixels (at most ``--chunk``'s default); else that default."""

    if opts.chunk:
        return opts.chunk
    return forward_chunk(device, size, opts.forward_chunk)


def _scorer(module: nn.Module, device: str, channels_last: bool) -> dict[str, Any]:
    """The model for the perturbed batches: on a CPU, a channels-last copy with each batch
    norm folded into the convolution before it (oneDNN's convolutions run several times
    faster on channels-last batches, and folding drops a pass over every map: 1.4-1.5x on
    resnet18's perturbed batches here, logits within 1e-5); the user's module keeps its own
    memory format. Only logits are read from it, so no hook is lost by the copy."""

    import torch

    if channels_last or device != "cpu":
        return {"scorer": module, "channels_last": channels_last}
    if not any(p.ndim == 4 for p in module.parameters()):
        return {"scorer": module, "channels_last": False}
    twin: nn.Module = copy.deepcopy(module).eval()
    try:
        from torch.fx.experimental.optimization import fuse

        twin = fuse(twin, inplace=True)
    except Exception:  # a model torch.fx cannot trace keeps its batch norms
        pass
    return {"scorer": twin.to(memory_format=torch.channels_last), "channels_last": True}


def _settings(model: str, loaded: LoadedModel, state: EvalState) -> dict[str, Any]:
    """What a resumed run must share with the earlier one."""
    opts = state.opts
    return {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "layer": state.layer,
        "methods": list(opts.methods),
        "target": opts.target,
        "protocol": state.protocol.describe(loaded.input_size),
        "sanity_blocks": state.stages,
        **attribution_settings(opts.methods, state.job),
    }


def _progress(record: Mapping[str, Any]) -> ImageResult:
    return image_progress(record, PurePosixPath(record["image"]).parent)


def _score_batch(
    state: EvalState, paths: list[Path], logits: torch.Tensor, x: torch.Tensor
) -> list[dict[str, Any]]:
    """Maps, baselines, curves, confidence changes and sanity correlations of one batch."""

    opts, loaded = state.opts, state.loaded
    x = x.float()
    targets = resolve_targets(logits.float(), opts.target, loaded.categories)
    chunk = _scoring_chunk(opts, x.device.type, (x.shape[-2], x.shape[-1]))
    maps = _maps(state, loaded.module, x, targets, chunk)
    grid = random_grid(maps)
    rels = [state.rels[str(p)] for p in paths]
    seeds = [zlib.crc32(rel.encode()) ^ opts.seed for rel in rels]
    every = {**maps, **baseline_maps(x, (int(grid[0]), int(grid[1])), state.protocol, seeds)}
    module: Callable[[Any], Any] = loaded.module
    scores = perturbation_curves(
        state.scorer or module,
        x,
        every,
        targets,
        state.protocol,
        batch_size=chunk,
        channels_last=state.channels_last,
    )
    before = logits.float().softmax(dim=1).double().cpu()
    p = before[range(len(targets)), targets]
    sanity = _sanity(state, x, targets, every, chunk)
    records = []
    for i, (path, rel) in enumerate(zip(paths, rels, strict=True)):
        per: dict[str, Any] = {}
        for name, s in scores.items():
            change = confidence_change(p[i : i + 1], s.masked[i : i + 1])
            per[name] = {
                "deletion_auc": float(s.deletion_auc[i]),
                "insertion_auc": float(s.insertion_auc[i]),
                "masked_probability": float(s.masked[i]),
                **{k: float(v[0]) for k, v in change.items()},
                "deletion": [round(float(v), 6) for v in s.deletion[i]],
                "insertion": [round(float(v), 6) for v in s.insertion[i]],
            }
        index = targets[i]
        names = loaded.categories or []
        records.append(
            {
                "image": rel,
                "path": str(path),
                "status": "ok",
                "target": index,
                "label": names[index] if index < len(names) else None,
                "probability": float(p[i]),
                "scores": per,
                "sanity": {name: [row[i] for row in rows] for name, rows in sanity.items()},
                "maps": {
                    name: [[round(float(v), 4) for v in row] for row in recorded(name, m[i])]
                    for name, m in maps.items()
                },
            }
        )
    return records


def _maps(
    state: EvalState, module: nn.Module, x: torch.Tensor, targets: list[int], chunk: int
) -> dict[str, torch.Tensor]:
    """Each method's maps of the batch at the layer, from ``module`` (the model or a twin)."""
    opts = state.opts
    return method_maps(
        module, x, state.layer, opts.methods, targets, state.shape, batch_size=chunk, job=state.job
    )


def _sanity(
    state: EvalState,
    x: torch.Tensor,
    targets: list[int],
    every: Mapping[str, torch.Tensor],
    chunk: int,
) -> dict[str, list[list[float | None]]]:
    """Per map name, per stage, each image's Spearman correlation between its map from the
    model and from the twin with the stage's blocks re-initialised (baselines do not read the
    weights: theirs are computed the same way, from the same input)."""
    out: dict[str, list[list[float | None]]] = {name: [] for name in every}
    for twin in state.twins:
        again = _maps(state, twin, x, targets, chunk)
        for name in every:
            fresh = again.get(name, every[name])
            out[name].append(spearman(every[name], fresh))
    return out
