"""The maps cam-eval scores: every CAM method's on one layer for a batch (one forward and
backward shared by the gradient methods) and every attribution method's at the input; and the
model's last blocks re-initialised one at a time from the output down for the sanity check
(Adebayo et al., 2018, cascading randomization)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from actviz.errors import ModelError, UsageError
from actviz.gradients.attribution import BASELINES as NAMED
from actviz.gradients.attribution import AttributionJob, baseline_image, unit_maps
from actviz.gradients.core import compute_gradients
from actviz.gradients.methods import CamInputs, scale_cams
from actviz.gradients.registry import MAP_METHODS

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.cam_eval.options import CamEvalOptions
    from actviz.gradients.attribution import AttributionJob
    from actviz.gradients.nchw import CamLayout
    from actviz.models import LoadedModel

__all__ = [
    "RECORDED_SIDE",
    "LayerShape",
    "attribution_job",
    "attribution_settings",
    "last_blocks",
    "layer_shape",
    "method_maps",
    "random_grid",
    "randomized",
    "recorded",
]


@dataclass(frozen=True)
class LayerShape:
    """How the CAM layer's output is laid out (:func:`actviz.gradients.nchw.to_nchw`)."""

    layout: CamLayout = "nchw"
    grid: tuple[int, int] | None = None
    prefix_tokens: int = 1


def layer_shape(contexts: Mapping[str, Any], module: str) -> LayerShape:
    """The layout of ``module``'s output, from the model's layer contexts."""
    ctx = contexts.get(module)
    grid = ctx.token_grid if ctx is not None else None
    if grid:
        return LayerShape("tokens", grid, ctx.prefix_tokens if ctx is not None else 1)
    return LayerShape("nhwc" if ctx is not None and ctx.channels_last else "nchw")


def method_maps(
    model: nn.Module,
    x: torch.Tensor,
    layer: str,
    methods: Sequence[str],
    targets: Sequence[int],
    shape: LayerShape,
    *,
    batch_size: int = 64,
    job: AttributionJob | None = None,
) -> dict[str, torch.Tensor]:
    """Each method's maps in ``[0, 1]`` of ``targets``, on the CPU: a CAM's ``(B, h, w)`` at
    ``layer`` (one forward and backward shared by every CAM), an attribution's at the input
    (:func:`actviz.gradients.attribution.unit_maps`), computed as ``job`` says (its model, input
    and targets replaced by these; None: the default settings).

    Raises:
        ModelError: If the layer gives no output or no gradient.
        UsageError: If its output is not a spatial map, or an attribution method refuses the
            model.
    """

    rows = [MAP_METHODS[m] for m in methods]
    maps: dict[str, torch.Tensor] = {}
    cams = [row for row in rows if row.kind == "cam"]
    if cams:
        result = compute_gradients(model, x, [layer], target=list(targets))
        capture = result.captures.get(layer)
        if capture is None:
            raise ModelError(f"no output and gradient of {layer}: pick another layer with --layers")
        inputs = CamInputs(
            capture.activation,
            capture.gradient,
            shape.layout,
            shape.grid,
            shape.prefix_tokens,
            model,
            x,
            targets,
            batch_size,
        )
        for row in cams:
            try:
                raw = row.compute(inputs)
            except ValueError as exc:
                raise UsageError(
                    f"the output of {layer} {tuple(capture.activation.shape)} is not a spatial "
                    f"map ({exc}); pick a convolution, stage or encoder block with --layers"
                ) from None
            maps[row.name] = scale_cams(raw).cpu()
    template = job if job is not None else AttributionJob(model, x, list(targets))
    for row in rows:
        if row.kind == "attribution":
            found = row.compute(replace(template, model=model, x=x, targets=list(targets)))
            maps[row.name] = unit_maps(found.values, row.signed).cpu()
    return {name: maps[name] for name in methods}


def last_blocks(model: nn.Module, count: int) -> list[str]:
    """The model's last ``count`` blocks, from the output down: the children of its
    ``Sequential``/``ModuleList`` containers and its own top-level modules with parameters,
    outermost only, in registration order (which stands in for depth, as elsewhere)."""
    from torch import nn

    chosen: list[str] = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(c + ".") for c in chosen):
            continue
        parent_name = name.rpartition(".")[0]
        parent = model.get_submodule(parent_name) if parent_name else model
        numbered = isinstance(parent, nn.Sequential | nn.ModuleList)
        top_leaf = not parent_name and not isinstance(module, nn.Sequential | nn.ModuleList)
        has_params = any(True for _ in module.parameters())
        if has_params and (numbered or (top_leaf and not _holds_blocks(module))):
            chosen.append(name)
    return chosen[::-1][:count]


def _holds_blocks(module: nn.Module) -> bool:
    """Whether a top-level module holds numbered blocks (an encoder), chosen one by one."""
    from torch import nn

    return any(isinstance(m, nn.Sequential | nn.ModuleList) for m in module.modules())


def randomized(model: nn.Module, blocks: Sequence[str], seed: int) -> nn.Module:
    """A copy of ``model`` (same device, eval mode) with every module of ``blocks``
    re-initialised by its own ``reset_parameters`` (parameters without one: normal, std
    0.02), from ``seed``; buffers such as BatchNorm's running statistics are reset too."""
    import torch

    twin = copy.deepcopy(model).eval()
    cuda = [p.device.index or 0 for p in twin.parameters() if p.is_cuda][:1]
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        for block in blocks:
            for module in twin.get_submodule(block).modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
                elif any(True for _ in module.parameters(recurse=False)):
                    with torch.no_grad():
                        for p in module.parameters(recurse=False):
                            p.normal_(0.0, 0.02)
    return twin


def attribution_job(loaded: LoadedModel, opts: CamEvalOptions) -> AttributionJob | None:
    """How the attribution methods among ``opts.methods`` run: the settings (SmoothGrad's
    noise seeded with ``--seed``), their steps and noisy copies in batches of
    ``--batch-size``, the baseline image decoded once; None when only CAMs are scored."""

    import torch

    if all(MAP_METHODS[m].kind == "cam" for m in opts.methods):
        return None
    settings = replace(opts.attribution, seed=opts.seed)
    pre = loaded.preprocess
    baseline = None
    if settings.baseline not in NAMED:
        baseline = baseline_image(settings.baseline, pre)
    return AttributionJob(
        loaded.module,
        torch.empty(0),
        [],
        settings,
        opts.execution.batch_size,
        baseline,
        tuple(pre.mean),
        tuple(pre.std),
    )


def attribution_settings(methods: Sequence[str], job: AttributionJob | None) -> dict[str, Any]:
    """The attribution methods' settings, for the settings a resume must share and the record
    (nothing when only CAMs are scored, so that their settings stay as they were)."""

    if job is None:
        return {}
    settings = job.settings
    return {
        "attribution": {
            m: settings.describe(MAP_METHODS[m].settings)
            for m in methods
            if MAP_METHODS[m].kind != "cam"
        }
    }


#: The longest side of a map in an image's record: an attribution's map, at the input's
#: resolution, is pooled to this for the record and the cases' pictures (it is scored whole).
RECORDED_SIDE = 64


def random_grid(maps: Mapping[str, torch.Tensor]) -> tuple[int, int]:
    """The random baseline's grid: the first CAM's (the layer's), else the first map's."""

    first = next((m for n, m in maps.items() if MAP_METHODS[n].kind == "cam"), None)
    shape = (first if first is not None else next(iter(maps.values()))).shape[-2:]
    return int(shape[0]), int(shape[1])


def recorded(name: str, heat: torch.Tensor) -> torch.Tensor:
    """One map as the record keeps it: an attribution's pooled (area mean) to at most
    :data:`RECORDED_SIDE` on its longer side; a CAM's as it is."""
    import torch.nn.functional as F

    height, width = int(heat.shape[-2]), int(heat.shape[-1])
    if MAP_METHODS[name].kind == "cam" or max(height, width) <= RECORDED_SIDE:
        return heat
    scale = RECORDED_SIDE / max(height, width)
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    return F.adaptive_avg_pool2d(heat[None, None].float(), size)[0, 0]
