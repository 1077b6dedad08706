"""The forward part: every image through the model (and model B on the same batch), each
side's points taken in its hook and put in its store, each image's prediction kept, and the
parts of the resumable state written as the images go."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from actviz.atlas.options import AtlasOptions
from actviz.atlas.points import PointRecorder, PointStore, split_rows
from actviz.atlas.resume import Parts
from actviz.command.forward import BatchForward
from actviz.command.progress import Reporter
from actviz.hooks import eval_mode
from actviz.results import ImageResult
from actviz.top_images.scoring import predicted_classes

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["Side", "Streamed", "progress_of", "stream"]


@dataclass
class Side:
    """One model of the atlas: the model, its planned layer, its points and predictions.

    Attributes:
        loaded: The model.
        plan: Its layer, read as maps.
        store: Its points.
        predictions: ``(images,)`` each image's predicted class (-1: none or not yet).
        label: How it is named (``A``, ``B``).
        warning: The random-weights warning given about it, if one was.
    """

    loaded: LoadedModel
    plan: LayerPlan
    store: PointStore
    predictions: npt.NDArray[np.int64]
    label: str = "A"
    warning: str | None = None


@dataclass
class Streamed:
    """What the pass over the images did: the images that failed, and the ones it ran."""

    failed: dict[int, str] = field(default_factory=dict)
    ran: int = 0


def stream(
    sides: list[Side],
    paths: list[Path],
    rels: list[str],
    todo: list[int],
    opts: AtlasOptions,
    parts: Parts,
    notify: Reporter,
) -> Streamed:
    """Run the images ``todo`` (indices into ``paths``) through the model(s)."""

    a = sides[0]
    second = sides[1].loaded if len(sides) > 1 else None
    forward = BatchForward(a.loaded, a.loaded.module, opts.execution, second=second)
    result = Streamed()
    batch_paths = [paths[i] for i in todo]

    def failed(position: int, error: str | None) -> None:
        index = todo[position]
        result.failed[index] = error or "unreadable"
        parts.fail(index, error or "unreadable")
        notify.advance(progress_of(paths[index], rels[index], error or "unreadable"))

    with contextlib.ExitStack() as stack:
        recorders = []
        for side in sides:
            stack.enter_context(eval_mode(side.loaded.module))
            recorders.append(
                stack.enter_context(
                    PointRecorder(side.loaded.module, side.plan, opts.points, opts.seed)
                )
            )
        for good, logits, _x in forward.batches(batch_paths, stack, failed):
            indices = [todo[position] for position, _, _ in good]
            names = [rels[i] for i in indices]
            outputs = [logits, forward.second_logits]
            for s, (side, recorder) in enumerate(zip(sides, recorders, strict=True)):
                vectors, positions = recorder.take(names)
                rows = vectors.shape[0] // len(indices)
                for index, (v, p) in zip(
                    indices, split_rows(vectors, positions, [rows] * len(indices)), strict=True
                ):
                    side.store.put(index, v, p)
                if side.loaded.classifier:
                    side.predictions[indices] = predicted_classes(outputs[s], len(indices))
            for index in indices:
                parts.add(index)
                result.ran += 1
                notify.advance(progress_of(paths[index], rels[index], None))
    parts.flush()
    return result


def progress_of(path: Path, rel: str, error: str | None) -> ImageResult:
    """What the reporter is told of one image: done, or failed with ``error``."""
    result = ImageResult(path=path, out_dir=PurePosixPath(rel).parent)
    result.status = "ok" if error is None else "failed"
    result.error = error
    return result
