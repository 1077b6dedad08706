"""A detector's row in a run: its options (``--score-threshold``, ``--detection``), what a
resumed run must match, and its probe, which gives each image its detections (and, with
``--cam``, its maps) from each batch."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from actviz.models.families import DETECTION, detection_transform, lower_score_threshold
from actviz.run.families.base import Batch, Extras, FamilyOption, RunFamily
from actviz.run.families.detection.cam import DetectionCams, detection_cams
from actviz.run.families.detection.pictures import DETECTION_CAM, DETECTION_HEADS, DETECTIONS
from actviz.run.families.detection.probe import DetectionProbe, Found, found_in, with_heads

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import RunOptions

__all__ = ["DETECTION_RUN", "Detections"]


class Detections:
    """A detector's probe in a run: each image's detections above the threshold and, with
    ``--cam``, its EigenCAM and the Grad-CAM of detection ``--detection``; at the end, how
    many images had none.

    Args:
        loaded: The detector.
        module: The detector as the run runs it.
        opts: The run's options.
        watch: The watch on its transform and heads, open for the run.
    """

    own_cam = True

    def __init__(
        self, loaded: LoadedModel, module: Any, opts: RunOptions, watch: DetectionProbe
    ) -> None:
        self.module, self.call, self.watch = module, loaded.family.call, watch
        self.categories, self.random = loaded.categories, loaded.weights.random
        self.threshold, self.rank = opts.score_threshold, opts.detection - 1
        self.cam = opts.gradients.cam
        self.empty = 0
        """Images with no detection above the threshold."""

    def batch(self, batch: Batch) -> Sequence[Extras]:
        """Each image's detections (and maps) as its pictures draw them and its record keeps
        them."""
        found = [found_in(output, self.threshold, self.categories) for output in batch.outputs]
        with batch.paused():  # the box head runs again, on the final boxes
            self.watch.pool_boxes()
        found = with_heads(found, batch.outputs, self.watch)
        cams: Sequence[DetectionCams | None] = [None] * len(found)
        if self.cam:
            cams = detection_cams(self.module, self.call, batch, found, self.rank, self.watch)
        extras = []
        sizes = self.watch.image_sizes
        for i, (one, maps) in enumerate(zip(found, cams, strict=True)):
            self.empty += not one.scores
            job = {"detections": one, "detection_cams": maps, "view_size": _view_size(sizes, i)}
            extras.append(Extras(job=job, record=_record(one)))
        return extras

    def warnings(self) -> list[str]:
        """The images without a detection above the threshold, if any."""
        if not self.empty:
            return []
        random = " (random weights: an untrained detector finds nothing)"
        return [
            f"no detection scored {self.threshold:g} or more in {self.empty} "
            f"image(s){random if self.random else ''}; the layers are recorded anyway, and "
            "--score-threshold lowers the cut"
        ]


def _view_size(sizes: Sequence[tuple[int, int]], i: int) -> tuple[int, int] | None:
    """``(width, height)`` image ``i`` was resized to by the detector's transform: its
    pictures are drawn at that size (a 4000-pixel photo is not drawn whole); None when
    unknown."""
    if i >= len(sizes):
        return None
    height, width = sizes[i]
    return (width, height)


def _record(found: Found) -> dict[str, Any]:
    """What one image's record keeps of its detections above the threshold (its pictures'
    files are named once they are known to be drawn)."""
    return {
        "detections": found.records(),
        "detections_file": None,
        "detection_heads_file": None,
        "detection_heads": dict(found.head_shapes) or None,
        "detection_cam_file": None,
    }


def _open(
    loaded: LoadedModel, module: Any, opts: RunOptions, stack: contextlib.ExitStack
) -> Detections | None:
    """The probe, with the watch on the detector's own transform (padding to crop, sizes)
    open for the run; None for a detector without that transform."""

    if detection_transform(module) is None:
        return None
    return Detections(loaded, module, opts, stack.enter_context(DetectionProbe(module)))


def _lower(loaded: LoadedModel, threshold: float) -> None:
    """The detector keeps boxes down to the run's threshold."""

    lower_score_threshold(loaded.module, threshold)


def _settings(loaded: LoadedModel, opts: RunOptions) -> dict[str, Any]:
    """The detections an earlier run recorded: its threshold and the detection explained."""
    return {"score_threshold": opts.score_threshold, "detection": opts.detection}


DETECTION_RUN = RunFamily(
    DETECTION,
    options=(
        FamilyOption(
            "score_threshold",
            apply=_lower,
            refusal="--score-threshold is for detectors; {model} gives no boxes: leave it out",
            default=0.5,
        ),
        FamilyOption(
            "detection",
            refusal=(
                "--detection picks a detector's detection for --cam; {model} gives no "
                "detections: leave it out"
            ),
            default=1,
        ),
    ),
    settings=_settings,
    own_cam=True,
    probe=_open,
    pictures=(DETECTIONS, DETECTION_HEADS, DETECTION_CAM),
)
