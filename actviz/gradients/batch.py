"""The backward half of a run: gradients of a target logit, and the Grad-CAM layers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.gradients.cam import ClassCam, class_cams
from actviz.gradients.core import compute_gradients, explain_zero_gradients, zero_cam_note
from actviz.gradients.registry import DEFAULT_CAM, method_cams
from actviz.layouts import plan_layout
from actviz.models.defaults import PATCH_MEAN_READOUTS

if TYPE_CHECKING:
    from actviz.gradients.cam import CamLayout

__all__ = ["backward", "choose_cam_keys"]


def choose_cam_keys(
    captures: Sequence[Any], contexts: Mapping[str, Any], *, explicit: bool
) -> frozenset[str]:
    """Grad-CAM layers: every selected spatial output, or by default the last one whose
    positions can carry the class evidence.

    In a model that classifies from a class token (torchvision's ViT), a patch token reaches
    the classifier only through an attention layer that mixes it into the class token; after
    the last attention, patch tokens get no gradient and their Grad-CAM is blank. So the
    default skips token outputs that no attention runs after (the last block's output, the
    final norm) and takes the last one before them (the block before the last).
    """

    spatial = [
        cap
        for cap in captures
        if cap.kind == "output"
        and plan_layout(cap.shape[1:], contexts.get(cap.module)).kind in ("maps", "clip")
        and len(cap.shape) >= 3
    ]
    if not spatial:
        raise UsageError(
            "--cam needs a layer with spatial output; select one with --layers, e.g. layer4"
        )
    if explicit:
        return frozenset(cap.key for cap in spatial)
    reaching = [cap for cap in spatial if patches_reach_readout(cap.module, contexts)]
    return frozenset(cap.key for cap in (reaching or spatial)[-1:])


def patches_reach_readout(module: str, contexts: Mapping[str, Any]) -> bool:
    """Whether the spatial positions of ``module``'s output can reach the classifier.

    True unless the module sits in a token model with class (prefix) tokens (a ViT, or a
    video transformer such as MViT) and no attention layer runs after it: then only the
    class token is read out, and the patch tokens of its output get no gradient (unless
    the classifier also reads the patch tokens' mean, as DINOv2's does). Registration
    order stands in for data flow, as in :func:`actviz.contexts.layer_contexts`.
    """
    ctx = contexts.get(module)
    if ctx is None:
        return True
    # A video transformer with a stated (T, H, W) grid (MViT) reads out its class token too.
    read_from_prefix = (ctx.token_grid is not None and ctx.prefix_tokens) or (
        ctx.clip_grid is not None
    )
    if not read_from_prefix:
        return True

    root = contexts.get("")
    if root is not None and root.module_type in PATCH_MEAN_READOUTS:
        return True  # the classifier reads the patch tokens' mean as well
    names = list(contexts)
    if module not in names:
        return True
    inside = module + "."
    return any(
        _mixes_tokens(contexts[name].module_type) and not name.startswith(inside)
        for name in names[names.index(module) + 1 :]
    )


def _mixes_tokens(module_type: str) -> bool:
    return "Attention" in module_type


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
    cam_method: str = DEFAULT_CAM,
) -> tuple[Mapping[str, Any], list[int], dict[str, list[list[Any]]]]:
    """Gradients of the target logit for ``layers``, and per CAM layer each image's class
    maps (drawn by ``cam_method``): the target's, or the top ``cam_classes`` classes' when
    more than one.

    A gradient whose drawn positions are all zero gets a note saying why, when the reason
    is known (see :func:`actviz.gradients.core.explain_zero_gradients`); so does an all-zero
    class map.
    """

    result = compute_gradients(module, x, layers, target=target, categories=categories)
    explain_zero_gradients(module, result.captures.values(), contexts)
    ranked: dict[str, list[list[Any]]] = {}
    for key in sorted(cam_keys):
        capture = result.captures.get(key)
        if cam_classes > 1 and ":" in key:
            continue  # ranked CAMs follow a module's first call
        ctx = contexts.get(key.split(":")[0].split("[")[0])
        grid = ctx.token_grid if ctx is not None else None
        layout: CamLayout = "tokens" if grid else ("nhwc" if ctx and ctx.channels_last else "nchw")
        prefix = ctx.prefix_tokens if ctx is not None and grid else 1
        if cam_classes > 1:
            maps = class_cams(
                module,
                x,
                key,
                k=cam_classes,
                categories=categories,
                layout=layout,
                grid=grid,
                prefix_tokens=prefix,
                method=cam_method,
            )
        elif capture is not None:
            maps = _target_cams(
                result, capture, categories, layout, grid, prefix, cam_method, module, x
            )
        else:
            continue
        if maps:
            ranked[key] = [[_with_zero_note(c, capture) for c in row] for row in maps]
    return result.captures, list(result.targets), ranked


def _target_cams(
    result: Any,
    capture: Any,
    categories: Sequence[str] | None,
    layout: CamLayout,
    grid: tuple[int, int] | None,
    prefix: int,
    method: str,
    module: Any,
    x: Any,
) -> list[list[Any]]:
    """Each image's map of its target class, from the gradients already taken (Score-CAM's
    from the masked forwards it runs)."""

    try:
        cams = method_cams(
            method,
            capture.activation,
            capture.gradient,
            layout=layout,
            grid=grid,
            prefix_tokens=prefix,
            model=module,
            x=x,
            targets=list(result.targets),
        )
    except ValueError:
        return []  # a layout the formula cannot read (MaxViT windows): drawn from the grid
    probabilities = result.probabilities
    rows = []
    for i, index in enumerate(result.targets):
        label = categories[index] if categories and index < len(categories) else None
        rows.append([ClassCam(index, label, float(probabilities[i, index]), cams[i], None, method)])
    return rows


def _with_zero_note(cam: Any, capture: Any) -> Any:
    """The class map, with a note when it is all zero saying why (when known)."""

    if cam.note is not None or bool(cam.cam.any()):
        return cam
    return replace(cam, note=zero_cam_note(capture.note if capture is not None else None))
