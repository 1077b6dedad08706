"""The image families' per-image pictures: what the model saw (every image of a run with a
report: ``<image>/input.png``) and a segmentation model's class map
(``<image>/segmentation.png``)."""

from __future__ import annotations

from actviz.run.families.base import ImageKind
from actviz.run.job import ImageJob, model_view

__all__ = ["INPUT", "SEGMENTATION"]


def _input_wanted(job: ImageJob) -> bool:
    return job.thumbnail and job.model_input is not None


def _input_png(job: ImageJob) -> bytes:
    """What the model saw, for the report (at the encoder's default level)."""
    from actviz.render.png import picture_png

    return picture_png(model_view(job))


#: What the model saw, for the report: ``<image>/input.png``, the record's ``thumbnail``.
INPUT = ImageKind("input", wanted=_input_wanted, make=_input_png, record="thumbnail")


def _segmentation_wanted(job: ImageJob) -> bool:
    return job.options.grids and job.extras.get("segmentation") is not None


def segmentation_png(job: ImageJob) -> bytes | None:
    """``<image folder>/segmentation.png`` of one image of a batch, from the capture of the
    module the job's ``segmentation`` extra names (its first call's output); None when that
    module was not captured (a selection without it) or the model input was not kept."""
    from actviz.render.png import picture_png
    from actviz.render.segmentation import segmentation_picture

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
SEGMENTATION = ImageKind(
    "segmentation", wanted=_segmentation_wanted, make=segmentation_png, record=None
)
