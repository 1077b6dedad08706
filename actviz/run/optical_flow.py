"""An optical-flow model's estimate of one pair at every iteration: ``<pair>/optical_flow.png``
(and, with ``--save-tensors``, ``<pair>/optical_flow.npy``)."""

from __future__ import annotations

from typing import Any

from actviz.run.job import ImageJob, header_notes

__all__ = ["optical_flow_iterations", "write_optical_flow"]


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


def write_optical_flow(job: ImageJob) -> str | None:
    """Write ``<pair folder>/optical_flow.png``; its path relative to the output folder, or
    None when the job holds no optical flow."""
    import numpy as np

    from actviz import output
    from actviz.render.optical_flow import render_optical_flow
    from actviz.render.overlay import input_view
    from actviz.render.png import encode_png

    if job.optical_flow is None:
        return None
    pair = []
    x = job.model_input.numpy() if job.model_input is not None else None
    if x is not None and x.ndim == 4 and x.shape[1] == 2:  # (C, 2, H, W): both pictures
        pair = [np.asarray(input_view(x[:, k], job.mean, job.std)) for k in range(2)]
    flows = job.optical_flow
    picture = render_optical_flow(
        flows,
        title=f"optical flow at each of {flows.shape[0]} iterations "
        f"({flows.shape[2]} x {flows.shape[3]}, the model's output)",
        pair=pair,
        notes=header_notes(job),
    )
    rel = job.folder / "optical_flow.png"
    png = encode_png(picture, level=job.options.png_compression)
    output.write_bytes(job.out_dir / rel, png)
    fmt = job.options.save_tensors
    if fmt is not None:  # every iteration's flow, (N, 2, H, W), beside the layers' tensors
        import torch

        output.write_tensor(
            job.out_dir / job.folder / f"optical_flow.{fmt}", torch.from_numpy(flows), fmt
        )
    return rel.as_posix()
