"""Optical-flow models in a run: ``--flow-updates`` sets RAFT's iterations, and each pair's
estimate at every iteration is drawn in ``<pair>/optical_flow.png`` (and, with
``--save-tensors``, kept in ``<pair>/optical_flow.npy``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.errors import UsageError
from actviz.models.families import OPTICAL_FLOW
from actviz.models.families.optical_flow import flow_updates
from actviz.render.optical_flow import render_optical_flow
from actviz.render.overlay import input_view
from actviz.run.families.base import Batch, Extras, FamilyOption, ImageKind, RunFamily
from actviz.run.job import ImageJob, header_notes

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import RunOptions

__all__ = [
    "OPTICAL_FLOW_PICTURE",
    "OPTICAL_FLOW_RUN",
    "optical_flow_iterations",
    "optical_flow_png",
]


def optical_flow_iterations(output: Any, row: int) -> Any:
    """Row ``row``'s flow at every iteration, ``(N, 2, H, W)`` float32 on the CPU, from a flow
    model's output (a list of ``(B, 2, H, W)`` fields, or one field); None for another output."""
    import torch

    fields = [output] if isinstance(output, torch.Tensor) else output
    if not isinstance(fields, (list, tuple)) or not fields:
        return None
    if not all(isinstance(f, torch.Tensor) and f.ndim == 4 and f.shape[1] == 2 for f in fields):
        return None
    return torch.stack([f[row] for f in fields]).detach().to("cpu", torch.float32).numpy()


def _wanted(job: ImageJob) -> bool:
    return job.options.grids and job.extras.get("optical_flow") is not None


def optical_flow_png(job: ImageJob) -> bytes:
    """The pair and its flow at every iteration, on one scale, under a header."""

    from actviz.render.png import encode_png

    pair = []
    x = job.model_input.numpy() if job.model_input is not None else None
    if x is not None and x.ndim == 4 and x.shape[1] == 2:  # (C, 2, H, W): both pictures
        pair = [np.asarray(input_view(x[:, k], job.mean, job.std)) for k in range(2)]
    flows = job.extras["optical_flow"]
    picture = render_optical_flow(
        flows,
        title=f"optical flow at each of {flows.shape[0]} iterations "
        f"({flows.shape[2]} x {flows.shape[3]}, the model's output)",
        pair=pair,
        notes=header_notes(job),
    )
    return encode_png(picture, level=job.options.png_compression)


def _tensor(job: ImageJob) -> Any:
    """Every iteration's flow, ``(N, 2, H, W)``, beside the layers' tensors."""
    import torch

    return torch.from_numpy(job.extras["optical_flow"])


#: The estimate at every iteration, named in the record's ``pictures``.
OPTICAL_FLOW_PICTURE = ImageKind(
    "optical_flow", wanted=_wanted, make=optical_flow_png, tensor=_tensor
)


def _updates(loaded: LoadedModel, updates: int) -> None:
    """RAFT's refinement iterations (at least 1)."""

    if updates < 1:
        raise UsageError(f"--flow-updates must be at least 1, not {updates}")
    flow_updates(loaded.module, updates)


def _settings(loaded: LoadedModel, opts: RunOptions) -> dict[str, Any]:
    """The iterations, when set."""
    return {"clip": [None, opts.flow_updates]} if opts.flow_updates is not None else {}


@dataclass(frozen=True)
class _Iterations:
    """Each pair's flow at every iteration, from the model's output."""

    own_cam: bool = False

    def batch(self, batch: Batch) -> Sequence[Extras]:
        return [
            Extras(job={"optical_flow": optical_flow_iterations(batch.outputs, i)})
            for i in range(batch.rows)
        ]

    def warnings(self) -> list[str]:
        return []


OPTICAL_FLOW_RUN = RunFamily(
    OPTICAL_FLOW,
    options=(
        FamilyOption(
            "flow_updates",
            apply=_updates,
            refusal="--flow-updates is for optical-flow models, not {model}",
        ),
    ),
    settings=_settings,
    probe=lambda loaded, module, opts, stack: _Iterations(),
    pictures=(OPTICAL_FLOW_PICTURE,),
)
