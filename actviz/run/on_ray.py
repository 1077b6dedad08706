"""``actviz stats`` on the Ray engine: per-image layer statistics from actors, merged on the driver.

An actor's work on a batch is the local engine's without pictures: the same hooks, the same
layer records (:func:`~actviz.run.draw.layer_records`: each layer's statistics, layout and
note, with nothing drawn or written), the same predictions. The driver passes each image
to the run's sink as its summary comes back (:class:`~actviz.run.sink.RunSink`), so the
statistics files, the manifest and the report are written by the very code a local run uses.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.engines import RayOptions, WorkerSpec, ray_batches
from actviz.hooks import ActivationRecorder, eval_mode
from actviz.io.loader import stacked_parts
from actviz.layouts import layer_contexts
from actviz.run.draw import layer_records
from actviz.run.job import ImageJob, top_k_predictions
from actviz.run.options import DrawOptions
from actviz.statistics import stats_callback

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.results import ImageResult, LayerResult, Prediction
    from actviz.run.options import RunOptions
    from actviz.run.sink import RunSink

__all__ = ["ImageSummary", "stats_on_ray", "stats_summaries"]


@dataclass
class ImageSummary:
    """What an actor sends back for one image: small, picklable, no tensors."""

    error: str | None = None
    size: tuple[int, int] | None = None
    layers: list[LayerResult] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    never_ran: list[str] = field(default_factory=list)


def stats_summaries(
    loaded: LoadedModel, paths: list[Path], layers: list[str], *, top_k: int, capture: Any
) -> list[tuple[list[int], ImageSummary]]:
    """One batch: decode, forward with the hooks, per image its layers' statistics."""
    import torch

    module = loaded.module
    contexts = layer_contexts(module, loaded.input_size)
    stats_fn = stats_callback(contexts)
    out: list[tuple[list[int], ImageSummary]] = []
    # Split where the input shape changes (a preprocessing that keeps each image's aspect
    # ratio), so that each part stacks; each image's statistics are its own maps'.
    for bad, good, x in stacked_parts(paths, loaded.preprocess, loaded.device):
        out += [([d.index], ImageSummary(error=d.error)) for d in bad]
        if x is None:
            continue
        with (
            ActivationRecorder(module, layers, mode=capture, per_image=True) as recorder,
            eval_mode(module),
            torch.inference_mode(),
        ):
            logits = loaded.family.call(module, x)  # as the family feeds it (a detector)
        never_ran = recorder.never_called()
        for i, item in enumerate(good):
            job = ImageJob(
                captures=recorder.captures,
                summaries=[],
                index=i,
                folder=PurePosixPath("."),
                out_dir=Path("."),  # records only: nothing is written
                options=DrawOptions(),
                contexts=contexts,
                stats_fn=stats_fn,
            )
            predictions = (
                top_k_predictions(logits, i, loaded.categories, top_k) if loaded.classifier else []
            )
            summary = ImageSummary(
                size=item.size,
                layers=layer_records(job),
                predictions=predictions,
                never_ran=never_ran,
            )
            out.append(([item.index], summary))
    return out


def stats_on_ray(
    model: str,
    names: list[str],
    todo: list[ImageResult],
    sink: RunSink,
    opts: RunOptions,
) -> set[str]:
    """Fill in ``todo`` from actors as their summaries come back, each passed on to the sink
    (recorded, summarised, let go) as it arrives: the driver keeps nothing per image.

    Returns:
        The selected modules that did not run.
    """
    ex = opts.execution
    spec = WorkerSpec(
        model=model,
        load=opts.load,
        layers=tuple(names),
        summarize=functools.partial(stats_summaries, top_k=opts.top_k, capture=opts.capture),
    )
    ray = RayOptions(address=ex.ray_address, workers=ex.workers or 2, batch_size=ex.batch_size)
    never_ran: set[str] = set()
    # A batch no actor could finish (the actor kept dying): each of its images failed, named.
    for pairs in ray_batches(spec, [r.path for r in todo], ray, lost=_lost):
        for (index,), summary in pairs:
            result = todo[index]
            if summary.error is not None:
                result.status, result.error = "failed", summary.error
            else:
                result.size, result.layers = summary.size, summary.layers
                result.predictions = summary.predictions
                never_ran.update(summary.never_ran)
            sink.add(result)
    return never_ran


def _lost(reason: str) -> ImageSummary:
    return ImageSummary(error=reason)
