"""What ``run`` needs from a model family, as rows (:class:`RunFamily`): the options it takes,
what a resumed run must match, its per-batch probe and the per-image pictures it adds.

A family's probe is opened for the run and gives each image of each batch its extras
(:class:`Extras`): what its pictures draw (a detector's detections, a flow model's estimate)
and what the image's record keeps. A per-image picture is a picture of the whole input
(what the model saw, a segmentation model's class map, a detector's detections, a flow
model's estimate), beside the per-layer pictures of
:data:`~actviz.run.pictures.PICTURE_KINDS`. Each kind is one :class:`ImageKind`:
its file's name, when an image's job draws it, its renderer, and where the image's record
names its file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from actviz.hooks import Capture
    from actviz.models import LoadedModel
    from actviz.models.families import Family
    from actviz.results import ImageResult
    from actviz.run.job import ImageJob
    from actviz.run.options import RunOptions

__all__ = ["Batch", "Extras", "FamilyOption", "ImageKind", "Probe", "RunFamily", "Same"]


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


@dataclass(frozen=True)
class Batch:
    """One batch of a run, as a family's probe sees it.

    Attributes:
        outputs: The model's output for the batch.
        captures: The batch's captures.
        x: The batch as the model took it (on its device).
        rows: How many images it holds.
        paused: Keeps the run's recorder from replacing its captures while the probe runs
            some of the model again (a context manager).
    """

    outputs: Any
    captures: Sequence[Capture]
    x: Any
    rows: int
    paused: Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class Extras:
    """What a family adds to one image of a run.

    Attributes:
        job: For its per-image pictures (``ImageJob.extras``).
        record: What the image's record keeps (``ImageResult.extras``), in the record's
            order; a picture's file is named there once it is known to be drawn.
    """

    job: Mapping[str, Any] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict)


class Probe(Protocol):
    """A family's part in one run, opened with it (:attr:`RunFamily.probe`): each image's
    extras from each batch. Its images keep what the model saw, which their pictures draw
    over."""

    @property
    def own_cam(self) -> bool:
        """Its ``--cam`` maps are its own (a detector's EigenCAM and one detection's
        Grad-CAM): no class is explained, and no backward pass of a class score runs."""
        ...

    def batch(self, batch: Batch) -> Sequence[Extras]:
        """Each image's extras, in the batch's order."""
        ...

    def warnings(self) -> list[str]:
        """What to say once every batch ran (images it found nothing in)."""
        ...


@dataclass(frozen=True)
class Same:
    """A probe that gives every image the same extras (the module a segmentation model's
    class map is read from)."""

    extras: Extras
    own_cam: bool = False

    def batch(self, batch: Batch) -> Sequence[Extras]:
        """``extras`` for each image."""
        return [self.extras] * batch.rows

    def warnings(self) -> list[str]:
        """Nothing to say."""
        return []


@dataclass(frozen=True)
class FamilyOption:
    """An option of ``run`` that a family takes.

    Attributes:
        name: Its field of :class:`~actviz.run.options.RunOptions` (``frames``).
        apply: How the family's model takes it, when it is given (not None): before the run
            plans anything.
        refusal: What a model of another family given it is told (``{model}``: its name);
            None when the others leave it be.
        default: The option's value when it is not given (``--score-threshold``'s 0.5):
            another family's model is refused only a value that differs from it.
    """

    name: str
    apply: Callable[[LoadedModel, Any], None] = lambda loaded, value: None
    refusal: str | None = None
    default: Any = None


def _no_settings(loaded: LoadedModel, opts: RunOptions) -> dict[str, Any]:
    return {}


def _no_probe(
    loaded: LoadedModel, module: Any, opts: RunOptions, stack: contextlib.ExitStack
) -> Probe | None:
    return None


@dataclass(frozen=True)
class RunFamily:
    """What ``run`` needs from one model family: a row of
    :data:`actviz.run.families.RUN_FAMILIES`, beside the family's load row.

    Attributes:
        family: The family's load row (:class:`~actviz.models.families.Family`).
        options: The options of ``run`` it takes, in the order they are taken.
        settings: What a resumed run must match, besides every run's settings (a clip's
            length, a detector's score threshold): the entries of the run's settings.
        own_cam: Its ``--cam`` draws maps of its own without a class score (a detector's),
            so a model without class scores may take it.
        probe: Opens its probe for the run (with the model as the run runs it; what it holds
            open goes on the stack); None when it has nothing to add to this model's images.
        pictures: The per-image pictures it adds (:class:`ImageKind`), drawn from the
            extras its probe gives.
    """

    family: Family
    options: tuple[FamilyOption, ...] = ()
    settings: Callable[[LoadedModel, RunOptions], dict[str, Any]] = _no_settings
    own_cam: bool = False
    probe: Callable[[LoadedModel, Any, RunOptions, contextlib.ExitStack], Probe | None] = _no_probe
    pictures: tuple[ImageKind, ...] = ()
