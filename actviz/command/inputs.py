"""What a command's inputs are for the model it loaded: images for an image model, clips for a
video model (video files, animations, folders of frames), pairs for an optical-flow model (two
images, consecutive frames). Discovery waits for the model when its name does not say which
(a user's own model); each mismatch is a one-line usage error that says what to pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from actviz.errors import UsageError

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
    import os

    from actviz.errors import ImageLoadError
    from actviz.io.images import Discovery

    for path in paths:
        if not os.path.exists(path):
            raise ImageLoadError(str(path), "no such file or folder; check the path")
    return Discovery(images=[], skipped=[])


def inputs_for(loaded: LoadedModel, paths: Sequence[Path], found: Discovery) -> Discovery:
    """The inputs of a loaded model: clips for a video model, pairs for a flow model (their
    partners set on its preprocessing), images otherwise (``found`` when the opening walked
    them already).

    Raises:
        UsageError: Still images for a video model, one image for a flow model, video files
            for an image model, or nothing usable.
    """
    from actviz.io.images import discover

    key = loaded.family.key
    if key == "video":
        from actviz.io.video import discover_clips

        return discover_clips(paths)
    if key == "optical_flow":
        from actviz.io.video import discover_pairs
        from actviz.models.clips import PairPreprocessing

        pairs, partners = discover_pairs(paths)
        if isinstance(loaded.preprocess, PairPreprocessing):
            loaded.preprocess = loaded.preprocess.with_partners(partners)
        return pairs
    _refuse_videos(loaded.name, paths)
    return (found if found.images else discover(paths)).require(paths)


def _refuse_videos(model: str, paths: Sequence[Path]) -> None:
    """A video file, or an animated GIF or WebP, named to an image model is refused: its first
    frame alone would be drawn as if it were the input."""
    from actviz.io.video import VIDEO_SUFFIXES

    video = next((p for p in paths if p.suffix.lower() in VIDEO_SUFFIXES or _animated(p)), None)
    if video is not None:
        raise UsageError(
            f"{video} is a video, and {model} takes images: pass image files or folders, or a "
            "video model (r3d_18, mvit_v2_s, ...; a model whose first convolution is Conv3d "
            "or that sets actviz_family = 'video')"
        )


def _animated(path: Path) -> bool:
    """Whether ``path`` is a GIF or WebP of more than one frame (reading its header only)."""
    from actviz.io.video import ANIMATED_SUFFIXES

    if path.suffix.lower() not in ANIMATED_SUFFIXES or not path.is_file():
        return False
    from PIL import Image

    try:
        with Image.open(path) as im:
            return int(getattr(im, "n_frames", 1)) > 1
    except Exception:  # unreadable: the image's own read names the problem
        return False


def _image_model_name(model: str) -> bool:
    """Whether a name is torchvision's and of a family that takes single images."""
    from actviz.models.sources import source_for

    if source_for(model).key != "torchvision":
        return False
    from actviz.models.families import torchvision_family

    family = torchvision_family(model)
    return family is not None and family.key not in ("video", "optical_flow")
