"""What a command's inputs are for the model it loaded, as its family's row says
(:class:`~actviz.models.families.Inputs`): images for an image model, clips for a video model
(video files, animations, folders of frames), pairs for an optical-flow model (two images,
consecutive frames). Discovery waits for the model when its name does not say which (a user's
own model); each mismatch is a one-line usage error that says what to pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from actviz.errors import ImageLoadError
from actviz.io.images import Discovery
from actviz.models.families import torchvision_family
from actviz.models.sources import source_for

if TYPE_CHECKING:
    from torch import nn

    from actviz.io.images import Discovery
    from actviz.models import LoadedModel

__all__ = ["deferred_discovery", "discovery_for", "inputs_for"]


def discovery_for(model: str | nn.Module) -> Callable[[Sequence[Path]], Discovery] | None:
    """How the opening finds the inputs of ``model`` before it is loaded: None (images, as
    every command) for a torchvision image model; a discovery that refuses nothing for a video
    or flow model, or a model whose family is known only once it is built, whose inputs
    :func:`inputs_for` finds after loading."""
    if isinstance(model, str) and _image_model_name(model):
        return None
    return deferred_discovery


def deferred_discovery(paths: Sequence[Path]) -> Discovery:
    """Every input must exist; what they hold is decided once the model is loaded."""

    for path in paths:
        if not os.path.exists(path):
            raise ImageLoadError(str(path), "no such file or folder; check the path")
    return Discovery(images=[], skipped=[])


def inputs_for(loaded: LoadedModel, paths: Sequence[Path], found: Discovery) -> Discovery:
    """The inputs of a loaded model, as its family's row finds them: clips for a video model,
    pairs for a flow model (their partners set on its preprocessing), images otherwise
    (``found`` when the opening walked them already).

    Raises:
        UsageError: Still images for a video model, one image for a flow model, video files
            for an image model, or nothing usable.
    """
    return loaded.family.inputs.find(loaded, paths, found)


def _image_model_name(model: str) -> bool:
    """Whether a name is torchvision's and of a family that takes single images."""

    if source_for(model).key != "torchvision":
        return False

    family = torchvision_family(model)
    return family is not None and family.inputs.images
