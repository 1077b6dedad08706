"""The backward half of a run: gradients of a target logit, Grad-CAM layers, flow charts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.results import ImageResult

if TYPE_CHECKING:
    from actviz.gradients.cam import CamLayout

__all__ = ["backward", "choose_cam_keys", "write_flow_chart", "write_run_flow_chart"]


def choose_cam_keys(
    captures: Sequence[Any], contexts: Mapping[str, Any], *, explicit: bool
) -> frozenset[str]:
    """Grad-CAM layers: every selected spatial output, or by default the last one."""
    from actviz.layouts import plan_layout

    spatial = [
        cap.key
        for cap in captures
        if cap.kind == "output"
        and plan_layout(cap.shape[1:], contexts.get(cap.module)).kind == "maps"
        and len(cap.shape) >= 3
    ]
    if not spatial:
        raise UsageError(
            "--cam needs a layer with spatial output; select one with --layers, e.g. layer4"
        )
    return frozenset(spatial if explicit else spatial[-1:])


def backward(
    module: Any,
    x: Any,
    layers: Sequence[str],
    *,
    target: str,
    categories: Sequence[str] | None,
    cam_keys: frozenset[str],
    cam_classes: int,
    contexts: Mapping[str, Any],
) -> tuple[Mapping[str, Any], list[int], dict[str, list[list[Any]]]]:
    """Gradients of the target logit for ``layers``, and ranked class CAMs when asked."""
    from actviz.gradients.cam import class_cams
    from actviz.gradients.core import compute_gradients

    result = compute_gradients(module, x, layers, target=target, categories=categories)
    ranked: dict[str, list[list[Any]]] = {}
    if cam_classes > 1:
        for key in sorted(cam_keys):
            if ":" in key:
                continue  # ranked CAMs follow a module's first call
            ctx = contexts.get(key)
            grid = ctx.token_grid if ctx is not None else None
            layout: CamLayout = (
                "tokens" if grid else ("nhwc" if ctx and ctx.channels_last else "nchw")
            )
            ranked[key] = class_cams(
                module,
                x,
                key,
                k=cam_classes,
                categories=categories,
                layout=layout,
                grid=grid,
                prefix_tokens=ctx.prefix_tokens if ctx is not None and grid else 1,
            )
    return result.captures, list(result.targets), ranked


def write_flow_chart(out_dir: Path, result: ImageResult) -> str | None:
    """One image's gradient norm per layer against depth."""
    from actviz import output
    from actviz.gradients.flowchart import gradient_flow_png

    layers = [layer for layer in result.layers if layer.gradient and layer.kind == "output"]
    if not layers:
        return None
    norms = [layer.gradient["norm"] if layer.gradient else None for layer in layers]
    png = gradient_flow_png(
        [layer.key for layer in layers],
        {result.out_dir.as_posix(): [math.nan if n is None else n for n in norms]},
        title=f"gradient flow: {result.path.name}",
        show_mean=False,
    )
    rel = result.out_dir / "gradient_flow.png"
    output.write_bytes(out_dir / rel, png)
    return rel.as_posix()


def write_run_flow_chart(out_dir: Path, results: Sequence[ImageResult]) -> Path | None:
    """Every image's gradient flow in one chart, with their geometric mean."""
    from actviz import output
    from actviz.gradients.flowchart import gradient_flow_png

    series: dict[str, list[float]] = {}
    keys: list[str] = []
    for result in results:
        layers = [x for x in result.layers if x.gradient and x.kind == "output"]
        if not layers:
            continue
        keys = keys or [x.key for x in layers]
        norms = {x.key: x.gradient["norm"] for x in layers if x.gradient}
        series[result.out_dir.as_posix()] = [
            math.nan if norms.get(k) is None else float(norms[k]) for k in keys
        ]
    if not series:
        return None
    path = out_dir / "gradient_flow.png"
    output.write_bytes(path, gradient_flow_png(keys, series, title="gradient flow: the run"))
    return path
