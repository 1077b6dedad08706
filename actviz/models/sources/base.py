"""The protocol every model source answers, and the small records it returns."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import nn

    from actviz.models.preprocessing import Preprocessing
    from actviz.models.weights import WeightsInfo

__all__ = ["Built", "MetaBuild", "ModelEntry", "ModelSource", "matching"]


@dataclass(frozen=True)
class ModelEntry:
    """One model name a source offers, its family, and whether ``run`` takes it.

    Attributes:
        name: The name as MODEL takes it (``resnet50``).
        family: The family's label (:attr:`actviz.models.families.Family.label`):
            ``classification``, ``segmentation``, ``detection``, ``video``,
            ``optical-flow`` or ``quantized``.
        runnable: True when :func:`~actviz.models.load_model` (and so ``run`` and
            ``stats``) takes it (``list-layers`` takes every name).
    """

    name: str
    family: str
    runnable: bool


@dataclass
class Built:
    """A model as a source built it for real, with the weights it asked for.

    Attributes:
        module: The model (training mode, on the CPU: the caller moves it and sets eval).
        weights: Which weights it carries, and why.
        preset: What the source reads preprocessing and class names from (torchvision's
            weights enum, a pretrained config, an image processor); None when it has none.
        classifier: False for a backbone whose output is features, not class scores: no
            top-k predictions and no Grad-CAM.
    """

    module: nn.Module
    weights: WeightsInfo
    preset: object = None
    classifier: bool = True


@dataclass
class MetaBuild:
    """A model built for ``list-layers``, to be traced without weights.

    Attributes:
        module: The model with its parameters on the meta device; None when it could not be
            built there.
        on_cpu: Builds the model on the CPU for a forward on zeros, when the meta device
            cannot build or run it (the user's own code may need real tensors); None when a
            failure on the meta device is final.
    """

    module: nn.Module | None
    on_cpu: Callable[[], nn.Module] | None = None


class ModelSource(Protocol):
    """Where models come from: torchvision's registry, the user's own factories, ...

    Each source is one module answering this protocol and one row of
    :data:`actviz.models.sources.SOURCES`; loading, ``list-layers``, ``actviz models`` and
    name checks go through the first row whose :meth:`claims` is true.
    """

    #: The source's name as ``actviz models --source`` and the manifest give it.
    key: str

    def claims(self, model: str) -> bool:
        """True when MODEL is spelled as this source's names are."""
        ...

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        """The names this source offers, sorted, filtered by a glob (see :func:`matching`);
        with ``include_all`` also those ``run`` does not take."""
        ...

    def check_name(self, model: str) -> None:
        """Raise an error naming close names or the fix unless MODEL can be loaded."""
        ...

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None,
    ) -> Built:
        """Resolve ``--weights`` (``auto``, ``none``, a name, a file) and build the model
        with them, for ``input_size`` where the architecture depends on it; random weights
        are seeded."""
        ...

    def build_meta(self, model: str, input_size: tuple[int, int] | None) -> MetaBuild:
        """The model without weights, for tracing its layers and shapes on the meta device."""
        ...

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        """The model's input transform: from ``preset`` (None: the default weights')."""
        ...

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        """The name of each output class, or None when unknown or when the model's head
        does not match them."""
        ...

    def versions(self) -> dict[str, str]:
        """The library versions this source's models depend on, for the manifest."""
        ...


def matching(names: Iterable[str], pattern: str | None) -> list[str]:
    """``names`` matching a glob such as ``resnet*``; a pattern without wildcards matches as
    a substring."""
    if not pattern:
        return list(names)
    glob = pattern if set("*?[") & set(pattern) else f"*{pattern}*"
    return [n for n in names if fnmatch.fnmatch(n, glob)]
