"""What ``run`` needs from a model family, as rows: the per-image picture kinds.

A per-image picture is a picture of the whole input (what the model saw, a segmentation
model's class map, a detector's detections, a flow model's estimate), beside the per-layer
pictures of :data:`~actviz.run.pictures.PICTURE_KINDS`. Each kind is one :class:`ImageKind`:
its file's name, when an image's job draws it, its renderer, and where the image's record
names its file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actviz.results import ImageResult
    from actviz.run.job import ImageJob

__all__ = ["ImageKind"]


@dataclass(frozen=True)
class ImageKind:
    """One kind of per-image picture: ``<image folder>/<name>.png``.

    Attributes:
        name: The file's name without ``.png`` (``detections``); its tensor's too, with
            ``--save-tensors`` (``optical_flow.npy``).
        wanted: Whether an image's job draws it (the family's extras it draws from are in the
            job, ``grids`` is on, ...). The main thread asks it when it names the file in
            the image's record; the render thread, when it draws.
        make: The renderer: the job in, PNG bytes out; None when there is nothing to draw
            after all (the file is then not written).
        record: Where the image's record names the file: ``pictures`` (under ``name`` in
            :attr:`ImageResult.pictures <actviz.results.ImageResult.pictures>`),
            ``thumbnail``, or a key of the image's family extras (``detections_file``);
            None when the record does not name it.
        tensor: What ``--save-tensors`` saves beside the picture (``<name>.<format>``);
            None for a kind that saves none.
    """

    name: str
    wanted: Callable[[ImageJob], bool]
    make: Callable[[ImageJob], bytes | None]
    record: str | None = "pictures"
    tensor: Callable[[ImageJob], Any] | None = None

    def keep(self, result: ImageResult, rel: str) -> None:
        """Name the file (``rel``, relative to the output folder) in the image's record."""
        if self.record == "pictures":
            result.pictures[self.name] = rel
        elif self.record == "thumbnail":
            result.thumbnail = rel
        elif self.record is not None:
            result.extras[self.record] = rel

    def kept(self, result: ImageResult) -> bool:
        """Whether the image's record names a file of this kind."""
        if self.record == "pictures":
            return self.name in result.pictures
        if self.record == "thumbnail":
            return result.thumbnail is not None
        return self.record is not None and result.extras.get(self.record) is not None
