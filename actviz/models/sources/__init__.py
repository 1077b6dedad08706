"""Model sources as a table: where a MODEL name comes from, and how to build it.

Each source is one module answering :class:`ModelSource` (names, a real build with the asked
weights, a build on the meta device, preprocessing, class names, the version record) and one
row of :data:`SOURCES`. Loading, ``list-layers``, ``actviz models`` and name checks all go
through :func:`source_for`, so adding a source is one module plus one row here.
"""

from __future__ import annotations

from actviz.errors import UsageError
from actviz.models.sources.base import Built, MetaBuild, ModelEntry, ModelSource, matching
from actviz.models.sources.factory import FactorySource
from actviz.models.sources.huggingface import HuggingFaceSource
from actviz.models.sources.timm import TimmSource
from actviz.models.sources.torchvision import TorchvisionSource

__all__ = [
    "SOURCES",
    "Built",
    "MetaBuild",
    "ModelEntry",
    "ModelSource",
    "matching",
    "source_for",
    "source_named",
]

#: Every model source, asked in order: the first whose ``claims`` is true owns the name.
#: torchvision claims every name, so it comes last.
SOURCES: tuple[ModelSource, ...] = (
    HuggingFaceSource(),  # before the factories: hf:NAME has a colon
    TimmSource(),
    FactorySource(),
    TorchvisionSource(),
)


def source_for(model: str) -> ModelSource:
    """The source that owns a MODEL name (torchvision for plain names)."""
    text = model.strip()
    for source in SOURCES:
        if source.claims(text):
            return source
    raise AssertionError("the last source claims every name")  # pragma: no cover


def source_named(key: str) -> ModelSource:
    """The source called ``key`` (``torchvision``, ...), as ``actviz models --source`` takes it.

    Raises:
        UsageError: If no source has that name; the message lists them.
    """
    for source in SOURCES:
        if source.key == key:
            return source
    known = ", ".join(source.key for source in SOURCES)
    raise UsageError(f"unknown model source '{key}'; use one of {known}")
