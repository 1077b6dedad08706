"""A segmentation model's class map of one image of a run: ``<image>/segmentation.png``."""

from __future__ import annotations

from actviz.run.job import ImageJob, model_view

__all__ = ["write_segmentation"]


def write_segmentation(job: ImageJob) -> str | None:
    """Write ``<image folder>/segmentation.png`` for one image of a batch, from the capture
    of the job's ``segmentation`` module (its first call's output).

    Returns:
        The file's path relative to the output folder; None when the logits module was not
        captured (a selection without it) or the model input was not kept.
    """
    from actviz import output
    from actviz.render.png import picture_png
    from actviz.render.segmentation import segmentation_picture

    if job.segmentation is None or job.model_input is None:
        return None
    cap = next(
        (c for c in job.captures if c.key == job.segmentation and c.tensor is not None), None
    )
    if cap is None or cap.tensor is None or cap.tensor.ndim != 4:
        return None
    logits = cap.tensor[job.index].numpy()
    notes = (
        ["random weights: an untrained model, so the classes mean nothing"]
        if getattr(job, "random_weights", False)
        else []
    )
    picture = segmentation_picture(
        model_view(job),
        logits,
        job.channel_names.get(job.segmentation),
        title=f"{cap.key}: the class of each pixel (argmax of {logits.shape[0]} logits, "
        "upsampled to the input)",
        notes=notes,
    )
    rel = job.folder / "segmentation.png"
    output.write_bytes(job.out_dir / rel, picture_png(picture, job.options.png_compression))
    return rel.as_posix()
