"""One batch of ``attribute``: the targets, every method's attributions, and per image and
method its picture (and with ``--save-tensors`` its tensor and the model's input), written
through ``output``, and its record."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.attribute.axioms import judged
from actviz.attribute.pictures import attribution_png, scaled
from actviz.attribute.result import AttributeState
from actviz.command.session import RANDOM_NOTE
from actviz.gradients.attribution import AttributionJob, to_maps
from actviz.gradients.core import resolve_targets
from actviz.gradients.registry import MAP_METHODS
from actviz.render.overlay import display_view

if TYPE_CHECKING:
    import torch

    from actviz.gradients.attribution import Attribution

__all__ = ["attribute_batch", "class_words"]


def class_words(index: int, label: str | None) -> str:
    """``"class 281 (tabby)"``, or ``"class 281"`` without a name."""
    return f"class {index} ({label})" if label is not None else f"class {index}"


def attribute_batch(
    state: AttributeState, paths: Sequence[Path], logits: torch.Tensor, x: torch.Tensor
) -> list[dict[str, Any]]:
    """Every method's attributions of one batch, drawn and recorded image by image."""

    opts, loaded = state.opts, state.loaded
    logits = logits.float()
    targets = resolve_targets(logits, opts.target, loaded.categories)
    pre = loaded.preprocess
    job = AttributionJob(
        loaded.module,
        x.float(),
        targets,
        opts.settings,
        opts.execution.batch_size,
        state.baseline,
        tuple(pre.mean),
        tuple(pre.std),
    )
    found: dict[str, Attribution] = {}
    for method in opts.methods:
        found[method] = attribution = MAP_METHODS[method].compute(job)
        if method not in state.records:
            state.records[method] = dict(attribution.record)
            state.notes += [n for n in attribution.notes if n not in state.notes]
    probabilities = logits.softmax(dim=1).double().cpu()
    names = loaded.categories or []
    records = []
    for i, path in enumerate(paths):
        index = targets[i]
        rel = state.rels[str(path)]
        record: dict[str, Any] = {
            "image": rel,
            "path": str(path),
            "status": "ok",
            "folder": state.folders[rel],
            "target": index,
            "label": names[index] if index < len(names) else None,
            "probability": float(probabilities[i, index]),
            "score": float(logits[i, index]),
            "methods": {},
        }
        view = _view(x[i], pre.mean, pre.std)
        for method, attribution in found.items():
            record["methods"][method] = _draw(state, record, view, method, attribution, i)
        if opts.save_tensors:
            record["input"] = f"{record['folder']}/input.npy"
            output.write_tensor(opts.out / record["input"], x[i].detach().float().cpu(), "npy")
        records.append(record)
    return records


def _view(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> Any:
    """What the model saw, as a picture (an input that is not 1 or 3 channels: their mean,
    as grey)."""

    array = x.detach().float().cpu().numpy()
    if array.shape[0] not in (1, 3):
        array = array.mean(axis=0, keepdims=True)
        mean, std = [sum(mean) / len(mean)], [sum(std) / len(std)]
    return display_view(array, mean, std)


def _draw(
    state: AttributeState,
    record: dict[str, Any],
    view: Any,
    method: str,
    attribution: Attribution,
    i: int,
) -> dict[str, Any]:
    """One method's picture of image ``i`` (and its tensor), and what its record holds."""

    opts = state.opts
    row = MAP_METHODS[method]
    values = attribution.values[i]
    shown = scaled(to_maps(values[None], row.signed)[0].numpy(), row.signed)
    axiom = judged(attribution.axioms[i])
    explained = class_words(record["target"], record["label"])
    if not row.class_specific:
        explained = f"any class (the model's top: {explained})"
    notes = [axiom["line"]] if axiom is not None and axiom.get("line") else []
    notes += attribution.notes
    if state.random:
        notes.insert(0, RANDOM_NOTE)
    stem = output.safe_name(method)
    picture = f"{record['folder']}/{stem}.png"
    png = attribution_png(
        view,
        shown,
        signed=row.signed,
        title=f"{record['image']}   {row.title}   {explained}   {record['probability']:.1%}",
        what=row.title,
        notes=notes,
        alpha=opts.alpha,
    )
    output.write_bytes(opts.out / picture, png)
    tensor = None
    if opts.save_tensors:
        tensor = f"{record['folder']}/{stem}.npy"
        output.write_tensor(opts.out / tensor, values, "npy")
    total = values.double()
    return {
        "picture": picture,
        "tensor": tensor,
        "shape": list(values.shape),
        "sum": _number(total.sum()),
        "min": _number(total.min()),
        "max": _number(total.max()),
        "scale": shown.scale,
        "scale_rule": shown.rule,
        "score": _number(attribution.scores[i]),
        "axiom": axiom,
    }


def _number(value: Any) -> float | None:
    """A float for the record; None for NaN or an infinity (JSON has neither)."""
    number = float(value)
    return number if math.isfinite(number) else None
