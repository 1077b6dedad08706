"""``actviz top-images`` on the Ray engine: each actor scores its batches and sends back the
batch's per-channel top-k candidates (:class:`~actviz.top_images.topk.Candidates`, no pixels);
the driver merges them into the same running top-k as a local run, whose order is total (score,
then path), so the result is identical whatever the pool size or the order batches come back in.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.engines import RayOptions, WorkerSpec, ray_batches
from actviz.io.loader import stacked_parts
from actviz.top_images.scoring import score_batch, unfit_reason

if TYPE_CHECKING:
    from actviz.command.options import ExecutionOptions, LoadOptions
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan
    from actviz.top_images.topk import Candidates

__all__ = ["BatchCandidates", "candidates_on_ray", "example_candidates"]


@dataclass
class BatchCandidates:
    """What the driver gets back for some images of a batch: their candidates, or the reason
    they could not be scored (unreadable, or maps that cannot be brought to the planned size).

    Attributes:
        candidates: The images' candidates; None for a failed image.
        sizes: Each image's size, in the order of the pair's indices.
        error: Why the image failed.
        resized: Capture key -> the per-image shape of maps pooled to the planned size.
    """

    candidates: Candidates | None = None
    sizes: tuple[tuple[int, int] | None, ...] = ()
    error: str | None = None
    resized: dict[str, tuple[int, ...]] = field(default_factory=dict)


def example_candidates(
    loaded: LoadedModel,
    paths: list[Path],
    layers: list[str],
    *,
    plans: Mapping[str, LayerPlan],
    score: Any,
    k: int,
) -> list[tuple[list[int], BatchCandidates]]:
    """One batch on an actor: decode, score with the run's plans, the batch's candidates.

    As the local engine: the batch is run in parts of one input shape (a preprocessing that
    keeps each image's aspect ratio), and the images of a part whose output cannot be brought
    to the planned size fail by name, with the fix.
    """

    out: list[tuple[list[int], BatchCandidates]] = []
    # Split where the input shape changes, so that each part stacks.
    for bad, good, x in stacked_parts(paths, loaded.preprocess, loaded.device):
        out += [([d.index], BatchCandidates(error=d.error)) for d in bad]
        if x is None:
            continue
        names = [str(paths[d.index]) for d in good]
        scored = score_batch(loaded.module, layers, plans, x, names, score=score, k=k)
        if scored.unfit:
            reason = unfit_reason(scored.unfit, plans, loaded.input_size, loaded.family.one_size)
            out += [([d.index], BatchCandidates(error=reason)) for d in good]
            continue
        sizes = tuple(d.size for d in good)
        back = BatchCandidates(scored.candidates, sizes, resized=scored.resized)
        out.append(([d.index for d in good], back))
    return out


def candidates_on_ray(
    model: str,
    load: LoadOptions,
    execution: ExecutionOptions,
    names: Sequence[str],
    plans: Mapping[str, LayerPlan],
    paths: Sequence[Path],
    *,
    score: Any,
    k: int,
) -> Iterator[tuple[list[int], BatchCandidates]]:
    """Each batch's candidates (or each unreadable image, or each image of a batch whose actor
    kept dying) as the actors send them back."""
    spec = WorkerSpec(
        model=model,
        load=load,
        layers=tuple(names),
        summarize=functools.partial(example_candidates, plans=dict(plans), score=score, k=k),
    )
    options = RayOptions(
        address=execution.ray_address,
        workers=execution.workers or 2,
        batch_size=execution.batch_size,
    )
    # A batch no actor could finish: each image failed, with the reason.
    for pairs in ray_batches(spec, paths, options, lost=_lost):
        yield from pairs


def _lost(reason: str) -> BatchCandidates:
    return BatchCandidates(error=reason)
