"""The image families in a run (classification, segmentation, quantized): what the model saw
(every image of a run with a report: ``<image>/input.png``) and, for a model with a
segmentation head, its class map (``<image>/segmentation.png``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from actviz.models.families import CLASSIFICATION, QUANTIZED, SEGMENTATION, Family
from actviz.render.png import picture_png
from actviz.render.segmentation import segmentation_picture
from actviz.run.families.base import Extras, ImageKind, Probe, RunFamily, Same
from actviz.run.job import ImageJob, model_view

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import RunOptions

__all__ = ["CLASS_MAP", "CLASSIFICATION_RUN", "INPUT", "QUANTIZED_RUN", "SEGMENTATION_RUN"]


def _input_wanted(job: ImageJob) -> bool:
    return job.thumbnail and job.model_input is not None


def _input_png(job: ImageJob) -> bytes:
    """What the model saw, for the report (at the encoder's default level)."""

    return picture_png(model_view(job))


#: What the model saw, for the report: ``<image>/input.png``, the record's ``thumbnail``.
INPUT = ImageKind("input", wanted=_input_wanted, make=_input_png, record="thumbnail")


def _segmentation_wanted(job: ImageJob) -> bool:
    return job.options.grids and job.extras.get("segmentation") is not None


def segmentation_png(job: ImageJob) -> bytes | None:
    """``<image folder>/segmentation.png`` of one image of a batch, from the capture of the
    module the job's ``segmentation`` extra names (its first call's output); None when that
    module was not captured (a selection without it) or the model input was not kept."""

    module = job.extras.get("segmentation")
    if module is None or job.model_input is None:
        return None
    cap = next((c for c in job.captures if c.key == module and c.tensor is not None), None)
    if cap is None or cap.tensor is None or cap.tensor.ndim != 4:
        return None
    logits = cap.tensor[job.index].numpy()
    notes = (
        ["random weights: an untrained model, so the classes mean nothing"]
        if job.random_weights
        else []
    )
    picture = segmentation_picture(
        model_view(job),
        logits,
        job.channel_names.get(module),
        title=f"{cap.key}: the class of each pixel (argmax of {logits.shape[0]} logits, "
        "upsampled to the input)",
        notes=notes,
    )
    return picture_png(picture, job.options.png_compression)


#: A segmentation model's class map over what the model saw; the record does not name it.
CLASS_MAP = ImageKind(
    "segmentation", wanted=_segmentation_wanted, make=segmentation_png, record=None
)


def _class_map_probe(
    loaded: LoadedModel, module: Any, opts: RunOptions, stack: contextlib.ExitStack
) -> Probe | None:
    """The module a model's class map is read from, for each image; None for a model without
    a segmentation head."""
    if loaded.segmentation is None:
        return None
    return Same(Extras(job={"segmentation": loaded.segmentation}))


def image_run(family: Family) -> RunFamily:
    """The run row of a family of image models: any of them with a segmentation head's class
    logits (a quantized one too) gets its class map."""
    return RunFamily(family, probe=_class_map_probe, pictures=(CLASS_MAP,))


CLASSIFICATION_RUN = image_run(CLASSIFICATION)
SEGMENTATION_RUN = image_run(SEGMENTATION)
QUANTIZED_RUN = image_run(QUANTIZED)
