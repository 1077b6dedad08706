"""The per-batch part: score every channel of every image in the forward hook, on the device.

:class:`ScoreRecorder` hooks the selected modules like ``run``'s recorder (one core,
:class:`~actviz.hooks.HookSession`; the same capture keys), but keeps no activation: inside
the hook, where the output lives (GPU or CPU), it reduces each channel's map to a score (its
spatial maximum or mean), whether it is above zero anywhere, the location of its maximum, and
the small window of the map around that maximum that the heat map over the crop needs. Only
those ``(B, C)`` numbers and windows are copied to the CPU: a layer of 512 maps of 56 x 56
costs 512 numbers per image, never a copy of the maps. The hook runs before any later
in-place op (ResNet's ``relu(inplace=True)`` after ``bn1``) can change the output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.hooks import HookSession, activations, eval_mode
from actviz.models.families import family_of
from actviz.top_images.options import Score
from actviz.top_images.plan import LayerPlan
from actviz.top_images.topk import Candidates, layer_candidates
from actviz.windows import ImageRows

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "BatchScores",
    "ScoreRecorder",
    "ScoredBatch",
    "batch_candidates",
    "fit_to_plan",
    "predicted_classes",
    "score_batch",
    "score_batch_candidates",
    "score_maps",
    "unfit_reason",
]


@dataclass(frozen=True, eq=False)
class BatchScores:
    """One layer's figures for one batch of ``n`` images, on the CPU.

    Attributes:
        scores: ``(n, C)`` float32 score per image and channel.
        active: ``(n, C)`` whether the channel is above zero anywhere.
        ys: ``(n, C)`` row of the channel's maximum.
        xs: ``(n, C)`` column of it.
        heat: ``(n, C, wh, ww)`` the map window around the maximum.
        origin: ``(n, C, 2)`` the window's top-left cell.
    """

    scores: npt.NDArray[np.float32]
    active: npt.NDArray[np.bool_]
    ys: npt.NDArray[np.int32]
    xs: npt.NDArray[np.int32]
    heat: npt.NDArray[np.float32]
    origin: npt.NDArray[np.int32]


def score_maps(
    tensor: torch.Tensor, plan: LayerPlan, score: Score, *, means: torch.Tensor | None = None
) -> BatchScores:
    """Score a batch of one layer's outputs with vectorized torch ops where they live.

    The channel's maximum gives the location (first maximum in row-major order, the same on
    every device), the ``max`` score and activity (above zero anywhere); ``mean`` averages the
    map. The window of the map around the maximum is gathered on the device too. ``means``,
    ``(B, C)``, replaces the mean of ``tensor`` (maps pooled to the plan's size: the means of
    the maps before pooling).
    """
    import torch

    batch = tensor.shape[0]
    c, h, w = plan.channels, plan.height, plan.width
    x = tensor.detach()
    # Flattened spatially without a copy where the layout allows: (B, C, HW) or (B, HW, C).
    if plan.mode == "nhwc":
        flat, dim = x.reshape(batch, h * w, c), 1
    elif plan.mode == "nchw":
        flat, dim = x.reshape(batch, c, h * w), 2
    else:
        assert plan.index is not None
        index = torch.as_tensor(plan.index, device=x.device)
        flat, dim = x.reshape(batch, -1).index_select(1, index).reshape(batch, c, h * w), 2
    flat = flat.float()
    values, where = flat.max(dim=dim)  # (B, C)
    if score == "max":
        scores = values
    else:
        scores = means.float() if means is not None else flat.mean(dim=dim)
    ys, xs = where // w, where % w
    rows, columns = plan.window
    first_rows = torch.as_tensor(plan.first_rows, device=x.device, dtype=torch.long)
    first_columns = torch.as_tensor(plan.first_columns, device=x.device, dtype=torch.long)
    top, left = first_rows[ys], first_columns[xs]
    offsets_y = torch.arange(rows, device=x.device)
    offsets_x = torch.arange(columns, device=x.device)
    cells = (top[..., None, None] + offsets_y[:, None]) * w + (
        left[..., None, None] + offsets_x[None, :]
    )  # (B, C, rows, columns)
    cells = cells.reshape(batch, c, rows * columns)
    if dim == 2:
        heat = flat.gather(2, cells)
    else:
        heat = flat.gather(1, cells.transpose(1, 2)).transpose(1, 2)
    return BatchScores(
        scores=scores.cpu().numpy().astype(np.float32, copy=False),
        active=(values > 0).cpu().numpy(),
        ys=ys.to(torch.int32).cpu().numpy(),
        xs=xs.to(torch.int32).cpu().numpy(),
        heat=heat.reshape(batch, c, rows, columns).cpu().numpy().astype(np.float32, copy=False),
        origin=torch.stack([top, left], dim=-1).to(torch.int32).cpu().numpy(),
    )


class ScoreRecorder(HookSession):
    """Score the selected outputs of each forward in the hooks; keep nothing else.

    After a forward, :meth:`take` gives capture key -> :class:`BatchScores` of that forward.
    Outputs without a plan (not seen by the probe, or not readable as maps) are ignored.

    Args:
        model: The model to hook.
        layers: Qualified names of the modules to hook.
        plans: Capture key -> its plan (:func:`actviz.top_images.plan.plan_layers`).
        score: ``max`` or ``mean``.
        transforms: Capture key -> what its output becomes before it is scored (a sparse
            dictionary's feature maps); None for an output it cannot transform.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: Sequence[str],
        plans: Mapping[str, LayerPlan],
        score: Score,
        transforms: Mapping[str, Callable[[torch.Tensor], torch.Tensor | None]] | None = None,
    ) -> None:
        super().__init__(model, layers)
        self.plans = plans
        self.transforms = transforms or {}
        self.score = score
        self._scores: dict[str, BatchScores] = {}
        self.resized: dict[str, tuple[int, ...]] = {}
        """Capture key -> the per-image shape of the latest forward's maps, where they were
        pooled to the plan's size."""
        self.unfit: dict[str, tuple[int, ...]] = {}
        """Capture key -> the per-image shape of the latest forward's output, where it could
        not be brought to the plan's (its images are not scored)."""
        self._rows = ImageRows(model)

    def _start_record(self) -> None:
        super()._start_record()
        self._scores = {}
        self.resized = {}
        self.unfit = {}

    def take(self) -> dict[str, BatchScores]:
        """The latest forward's scores, forgotten here."""
        scores, self._scores = self._scores, {}
        return scores

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            _call, key = self._next_call(name)
            for element, raw in activations(output):
                plan = self.plans.get(key + element)
                # Windowed attention's rows put back into each image's grid, as planned.
                tensor, _ = self._rows.split(name, raw)
                if plan is None or tensor is None:
                    continue
                transform = self.transforms.get(key + element)
                if transform is not None:
                    given, tensor = tuple(tensor.shape[1:]), transform(tensor)
                    if tensor is None:
                        self.unfit[key + element] = given
                        continue
                shape = tuple(tensor.shape[1:])
                if shape == plan.shape:
                    self._scores[key + element] = score_maps(tensor, plan, self.score)
                    continue
                fitted = fit_to_plan(tensor, plan)
                if fitted is None:
                    self.unfit[key + element] = shape
                    continue
                self.resized[key + element] = shape
                pooled, means = fitted
                self._scores[key + element] = score_maps(pooled, plan, self.score, means=means)

        self._add_forward_hook(module, hook)


def fit_to_plan(tensor: torch.Tensor, plan: LayerPlan) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Maps of another size than planned (an image of another aspect ratio, through a
    preprocessing that does not crop) brought to the plan's ``H x W`` by adaptive max
    pooling, with each channel's mean before pooling: maxima, activity and means stay exact,
    the location is read on the planned grid. None when the output differs in more than its
    map size, or is not laid out as plain maps.
    """
    import torch.nn.functional as F

    shape = tuple(tensor.shape[1:])
    if len(shape) != 3 or len(plan.shape) != 3:
        return None
    size = (plan.height, plan.width)
    x = tensor.detach().float()
    if plan.mode == "nchw" and shape[0] == plan.channels:
        return F.adaptive_max_pool2d(x, size), x.mean(dim=(2, 3))
    if plan.mode == "nhwc" and shape[2] == plan.channels:
        pooled = F.adaptive_max_pool2d(x.permute(0, 3, 1, 2), size).permute(0, 2, 3, 1)
        return pooled.contiguous(), x.mean(dim=(1, 2))
    return None


def predicted_classes(logits: object, count: int) -> npt.NDArray[np.int32]:
    """Each image's top-1 class from a classifier's ``(B, classes)`` logits; -1 for models
    that do not output one score per class, and for an image whose highest score is shared
    by several classes (a head that outputs all zeros): argmax would name the first of them,
    a prediction the model did not make."""
    import torch

    if isinstance(logits, torch.Tensor) and logits.ndim == 2 and logits.shape[0] == count:
        scores = logits.float()
        classes = scores.argmax(dim=1)
        if scores.shape[1] > 1:
            best = scores.topk(2, dim=1).values
            classes = torch.where(best[:, 0] == best[:, 1], -1, classes)
        return np.asarray(classes.cpu().numpy(), dtype=np.int32)
    return np.full(count, -1, dtype=np.int32)


def batch_candidates(
    paths: Sequence[str],
    scores: Mapping[str, BatchScores],
    classes: npt.ArrayLike,
    k: int,
) -> Candidates:
    """One batch's candidates: per layer, each channel's best ``k`` images of the batch.

    Pure numpy, so it runs wherever the batch ran. ``paths`` name the batch's images in the
    order of the scores' rows; ``classes`` are their predicted top-1 classes.
    """
    layers = {
        key: layer_candidates(paths, s.scores, s.active, s.ys, s.xs, s.heat, s.origin, classes, k)
        for key, s in scores.items()
    }
    return Candidates(layers=layers, paths=tuple(paths))


@dataclass(frozen=True)
class ScoredBatch:
    """One batch through the hooked model: its candidates, and what the recorder found.

    Attributes:
        candidates: Per layer, each channel's best images of the batch.
        resized: Capture key -> the per-image shape of maps pooled to the plan's size.
        unfit: Capture key -> the per-image shape of an output that could not be brought to
            the plan's (no candidates of that layer: the batch's images cannot be scored).
    """

    candidates: Candidates
    resized: dict[str, tuple[int, ...]]
    unfit: dict[str, tuple[int, ...]]


def score_batch(
    module: nn.Module,
    names: Sequence[str],
    plans: Mapping[str, LayerPlan],
    x: torch.Tensor,
    paths: Sequence[str],
    *,
    score: Score,
    k: int,
) -> ScoredBatch:
    """The whole per-batch step for an engine: hook, run the batch, build its candidates.

    Args:
        module: The model, on the device of ``x``.
        names: The selected module names.
        plans: The run's plans (computed once on the driver and shipped to workers).
        x: The preprocessed batch.
        paths: The batch's image paths, in the order of ``x``.
        score: ``max`` or ``mean``.
        k: Entries kept per channel.
    """
    import torch

    with ScoreRecorder(module, names, plans, score) as recorder, eval_mode(module):
        with torch.inference_mode():
            logits: Any = family_of(module).call(module, x)  # as its family feeds it
        scores = recorder.take()
    candidates = batch_candidates(paths, scores, predicted_classes(logits, len(paths)), k)
    return ScoredBatch(candidates, dict(recorder.resized), dict(recorder.unfit))


def score_batch_candidates(
    module: nn.Module,
    names: Sequence[str],
    plans: Mapping[str, LayerPlan],
    x: torch.Tensor,
    paths: Sequence[str],
    *,
    score: Score,
    k: int,
) -> Candidates:
    """:func:`score_batch`'s candidates alone (a layer whose output could not be brought to
    its plan's size has none)."""
    return score_batch(module, names, plans, x, paths, score=score, k=k).candidates


def unfit_reason(
    unfit: Mapping[str, tuple[int, ...]],
    plans: Mapping[str, LayerPlan],
    input_size: tuple[int, int],
    fix: str = "pass --input-size H,W to crop every image to one size",
) -> str:
    """Why the images of a batch whose output could not be brought to the plan's size were
    not scored, with the fix (the model family's ``one_size``): one line, the same on every
    engine."""
    key, shape = next(iter(unfit.items()))
    return (
        f"its output of {key} is {shape}, not {plans[key].shape} as at the input size "
        f"{input_size[0]}x{input_size[1]}, and cannot be brought to it; {fix}"
    )
