"""One pass over the folder for the feature pages: per feature, a bounded random sample of the
images it fires on with their scores (the examples below the top, at activation quantiles),
and how often each class is predicted where it fires (the classes it co-occurs with). Memory
is bounded by the features, the sample size and the classes, never by the folder."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from actviz.command.forward import BatchForward
from actviz.hooks import eval_mode
from actviz.sae.tokens import TokenRecorder

if TYPE_CHECKING:
    import torch

    from actviz.command.options import ExecutionOptions
    from actviz.dictionary import SparseDictionary
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["QUANTILES", "Survey", "survey"]

#: Images kept per feature in the random sample.
SAMPLE = 64
#: The activation quantiles (of the images a feature fires on) its page shows examples at.
QUANTILES = (0.75, 0.5, 0.25, 0.05)


@dataclass
class Survey:
    """What the pass found.

    Attributes:
        paths: The images, in the order of the indices below.
        keys: ``(F, SAMPLE)`` random priorities of the sample (inf: an empty slot).
        scores: ``(F, SAMPLE)`` each sampled image's score (its largest activation).
        images: ``(F, SAMPLE)`` each sampled image's index in ``paths``.
        fired: ``(F,)`` images each feature fired on.
        seen: The images whose vectors were read (those that failed are not counted).
        vectors: The vectors of all those images.
        active: ``(F,)`` of those, how many each feature was active on.
        total: ``(F,)`` the sum of its activations over them.
        peak: ``(F,)`` its largest activation.
        classes: ``(F, classes)`` of those, how many were predicted as each class; None for
            a model without class scores.
    """

    paths: list[Path]
    keys: torch.Tensor
    scores: torch.Tensor
    images: torch.Tensor
    fired: torch.Tensor
    classes: torch.Tensor | None
    seen: int
    vectors: int
    active: torch.Tensor
    total: torch.Tensor
    peak: torch.Tensor

    def figures(self, feature: int) -> dict[str, float]:
        """The feature over the whole folder, every figure from the same vectors: density
        (share of vectors it is active on), images (share of images it fires on), strength
        (mean activation where active) and peak."""
        active = float(self.active[feature])
        return {
            "density": active / max(self.vectors, 1),
            "images": float(self.fired[feature]) / max(self.seen, 1),
            "strength": float(self.total[feature]) / active if active else 0.0,
            "peak": float(self.peak[feature]),
        }

    def examples(self, feature: int) -> list[tuple[float, Path, float]]:
        """The feature's sampled images at :data:`QUANTILES`: ``(quantile, path, score)``."""
        kept = self.keys[feature].isfinite()
        scores = self.scores[feature][kept]
        if scores.numel() == 0:
            return []
        order = scores.argsort()
        images = self.images[feature][kept][order]
        scores = scores[order]
        chosen = []
        for q in QUANTILES:
            at = min(int(q * scores.numel()), scores.numel() - 1)
            chosen.append((q, self.paths[int(images[at])], float(scores[at])))
        return chosen

    def top_classes(self, feature: int, count: int = 3) -> list[tuple[int, float]]:
        """The classes predicted most often where the feature fires: ``(class, share)``."""
        if self.classes is None or int(self.fired[feature]) == 0:
            return []
        row = self.classes[feature].double()
        values, indices = row.topk(min(count, row.numel()))
        total = float(self.fired[feature])
        return [(int(i), float(v) / total) for v, i in zip(values, indices, strict=True) if v > 0]


def survey(
    loaded: LoadedModel,
    plan: LayerPlan,
    sae: SparseDictionary,
    paths: list[Path],
    *,
    execution: ExecutionOptions,
    seed: int,
) -> Survey:
    """Run every image once, keep the bounded sample and the class counts."""
    import torch

    device, f = loaded.device, sae.features
    generator = torch.Generator().manual_seed(seed)
    keys = torch.full((f, SAMPLE), float("inf"), device=device)
    scores = torch.zeros((f, SAMPLE), device=device)
    images = torch.zeros((f, SAMPLE), dtype=torch.long, device=device)
    fired = torch.zeros(f, dtype=torch.long, device=device)
    classes: torch.Tensor | None = None
    active = torch.zeros(f, dtype=torch.float64, device=device)
    total = torch.zeros(f, dtype=torch.float64, device=device)
    peak = torch.zeros(f, dtype=torch.float64, device=device)
    count = seen = 0
    per_image = plan.height * plan.width
    forward = BatchForward(loaded, loaded.module, execution)
    with (
        TokenRecorder(loaded.module, plan) as recorder,
        eval_mode(loaded.module),
        contextlib.ExitStack() as stack,
    ):
        for good, logits, _x in forward.batches(paths, stack):
            found = recorder.take()
            if found is None:
                continue
            with torch.no_grad():
                codes = sae.encode(found)
                best = codes.reshape(len(good), per_image, f).amax(dim=1)  # (B, F)
            count += codes.shape[0]
            seen += len(good)
            active += (codes > 0).sum(dim=0).double()
            total += codes.double().sum(dim=0)
            peak = torch.maximum(peak, best.double().amax(dim=0))
            on = best > 0
            fired += on.sum(dim=0)
            drawn = torch.rand(best.shape, generator=generator).to(device)
            drawn = torch.where(on, drawn, torch.full_like(drawn, float("inf")))
            index = torch.as_tensor([i for i, _, _ in good], device=device)
            all_keys = torch.cat([keys, drawn.T], dim=1)
            kept = all_keys.topk(SAMPLE, dim=1, largest=False).indices
            keys = all_keys.gather(1, kept)
            scores = torch.cat([scores, best.T], dim=1).gather(1, kept)
            images = torch.cat([images, index.expand(f, -1)], dim=1).gather(1, kept)
            if loaded.classifier and isinstance(logits, torch.Tensor) and logits.ndim == 2:
                predicted = torch.nn.functional.one_hot(logits.argmax(dim=1), logits.shape[1]).to(
                    device
                )
                counts = on.T.long() @ predicted.long()  # (F, classes)
                classes = counts if classes is None else classes + counts
    return Survey(
        paths=list(paths),
        keys=keys.cpu(),
        scores=scores.cpu(),
        images=images.cpu(),
        fired=fired.cpu(),
        classes=classes.cpu() if classes is not None else None,
        seen=seen,
        vectors=count,
        active=active.cpu(),
        total=total.cpu(),
        peak=peak.cpu(),
    )
