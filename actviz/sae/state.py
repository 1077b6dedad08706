"""The training state that Ctrl-C (and every few seconds of training) leaves behind, and
``--resume`` reads: every dictionary's weights, Adam's moments, and where the pass was, in one
safetensors file with the settings in its metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.command.resume import check_settings
from actviz.dictionary import SparseDictionary
from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["STATE_FILE", "Position", "read_state", "state_bytes"]

STATE_FILE = "sae-state.safetensors"


@dataclass
class Position:
    """Where training is: the epoch, the images of it done, the steps and vectors so far."""

    epoch: int = 0
    done: int = 0
    steps: int = 0
    tokens: int = 0
    running_fve: float | None = None
    seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


def state_bytes(
    saes: list[SparseDictionary],
    adam: dict[str, torch.Tensor],
    position: Position,
    settings: dict[str, Any],
) -> bytes:
    from safetensors.torch import save

    tensors = dict(adam)
    for i, sae in enumerate(saes):
        for name in ("w_enc", "b_enc", "w_dec", "b_dec", "mean"):
            tensors[f"sae.{i}.{name}"] = getattr(sae, name).detach().float().cpu().clone()
    meta = {
        "settings": settings,
        "position": position.__dict__,
        "dictionaries": [
            {"scale": s.scale, "k": s.k, "activation": s.activation, "threshold": s.threshold}
            for s in saes
        ],
    }
    return bytes(save(tensors, metadata={"actviz-state": json.dumps(meta)}))


def read_state(
    out: Path, settings: dict[str, Any], device: Any
) -> tuple[list[SparseDictionary], dict[str, torch.Tensor], Position] | None:
    """The state an interrupted run left in ``out``, or None when there is none.

    Raises:
        SettingsChanged: For a state saved with other settings.
        UsageError: For a state that cannot be read.
    """
    from safetensors import safe_open

    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            meta = json.loads((fh.metadata() or {})["actviz-state"])
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118
    except Exception:  # a torn or foreign file: one line, the fix named
        raise UsageError(
            f"{path} cannot be read; run without --resume (with --overwrite) to start again"
        ) from None
    check_settings(out, meta["settings"], settings)
    saes = []
    for i, d in enumerate(meta["dictionaries"]):
        parts = {n: tensors[f"sae.{i}.{n}"] for n in ("w_enc", "b_enc", "w_dec", "b_dec", "mean")}
        saes.append(
            SparseDictionary(
                **parts,
                scale=d["scale"],
                k=d["k"],
                activation=d["activation"],
                threshold=d["threshold"],
            ).to(device)
        )
    adam = {name: t for name, t in tensors.items() if name.startswith("adam.")}
    return saes, adam, Position(**meta["position"])
