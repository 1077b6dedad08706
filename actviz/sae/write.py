"""What ``actviz sae`` hands :mod:`actviz.output`: the dictionaries (``sae.safetensors``, and
``sae-seedN.safetensors`` for the other seeds), their config and metrics (``sae.json``, and in
each file's metadata), and the training state."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.head import json_head, model_fields
from actviz.dictionary import FORMAT, dictionary_bytes
from actviz.dictionary.file import FILE
from actviz.sae.state import STATE_FILE, state_bytes

if TYPE_CHECKING:
    from actviz.command import Command, Loaded
    from actviz.sae.metrics import Quality
    from actviz.sae.session import Run
    from actviz.top_images.plan import LayerPlan

__all__ = ["FILE", "JSON_FILE", "seed_file", "write_dictionaries", "write_state"]

JSON_FILE = "sae.json"


def seed_file(index: int) -> str:
    """The file of the ``index``-th dictionary (0: ``sae.safetensors``)."""
    return FILE if index == 0 else f"sae-seed{index}.safetensors"


def write_state(out: Path, run: Run) -> None:
    """The training state, for Ctrl-C and ``--resume``."""

    assert run.saes is not None
    data = state_bytes(run.saes, run.adam(), run.position, run.settings)
    output.write_bytes(out / STATE_FILE, data)
    run.saved = time.monotonic()


def write_dictionaries(
    out: Path,
    run: Run,
    cmd: Command,
    opened: Loaded,
    plan: LayerPlan,
    qualities: list[Quality] | None,
    *,
    complete: bool,
    held_out: int = 0,
) -> dict[str, Any]:
    """Every dictionary's file and ``sae.json``; the document written."""

    assert run.saes is not None
    loaded, opts = opened.model, run.opts
    doc: dict[str, Any] = json_head(
        infos=[loaded.record()],
        device=str(loaded.device),
        model=model_fields(cmd.model, loaded.record(), loaded.weights, opened.warning),
    )
    first = qualities[0] if qualities else None
    if first is not None:
        run.saes[0].per_feature["density"] = _tensor(first.density())
        run.saes[0].per_feature["strength"] = _tensor(first.mean_strength())
    stability = run.saes[0].per_feature.get("stability")
    doc.update(
        {
            "format": FORMAT,
            "complete": complete,
            "layer": {"key": plan.key, **plan.describe()},
            "input_size": list(loaded.input_size),
            "channels": plan.channels,
            "features": run.features,
            "k": run.k,
            "sizes": {"k": run.sizes.k_from, "features": run.sizes.features_from},
            "kind": opts.kind,
            "normalisation": {
                "mean": "tensor 'mean' of sae.safetensors",
                "scale": run.saes[0].scale,
                "rule": "x' = (x - mean) / scale; mean squared norm of x' - its mean = channels",
            },
            "training": {
                "epochs": run.position.epoch,
                "epochs_asked": opts.epochs,
                "min_steps": opts.min_steps,
                "steps": run.position.steps,
                "vectors": run.position.tokens,
                "images": run.trained_images,
                "failed": [{"path": str(path), "error": error} for path, error in run.failed],
                "held_out_images": held_out,
                "running_fve": run.position.running_fve,
                "seconds": round(run.position.seconds, 3),
                "history": run.position.history,
                "lr": opts.lr or run.saes[0].default_lr(run.features),
                "seed": opts.seed,
                "seeds": opts.seeds,
                "sae_batch": run.schedule.batch,
                "buffer": opts.buffer,
            },
            "metrics": first.record(spliced=True) if first is not None else None,
            "seeds": [
                {
                    "seed": opts.seed + i,
                    "file": seed_file(i),
                    "fve": (q.record(spliced=False)["fve"] if q is not None else None),
                }
                for i, q in enumerate(qualities or [None] * len(run.saes))
            ],
            "stability": None
            if stability is None
            else {
                "mean": round(float(stability.mean().item()), 6),
                "stable_share": round(float((stability > 0.7).float().mean().item()), 6),
                "stable_above": 0.7,
            },
            "warnings": list(cmd.warnings),
        }
    )
    for i, sae in enumerate(run.saes):
        config = {**doc, "seed": opts.seed + i}
        if i:
            config["metrics"] = None
        output.write_bytes(out / seed_file(i), dictionary_bytes(sae, config))
    output.write_json(out / JSON_FILE, doc)
    return doc


def _tensor(values: list[float]) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.float32)
