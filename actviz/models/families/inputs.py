"""What a family's models take, as rows: single images, clips (video files, animations, folders
of frames) or pairs (two images, consecutive frames). Each row says how a command finds its
inputs among the paths it was given and what a progress bar and a summary call them.

A family's load row names its inputs (``Family.inputs``); the command kit finds a loaded
model's inputs through it (:func:`actviz.command.inputs.inputs_for`), and the progress bar
counts them in its words. Each mismatch is a one-line usage error that says what to pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from actviz.errors import UsageError
from actviz.io.images import discover
from actviz.io.video import VIDEO_SUFFIXES, animation_note, discover_clips, discover_pairs
from actviz.models.clips import PairPreprocessing

if TYPE_CHECKING:
    from actviz.io.images import Discovery
    from actviz.models.preprocessing import Preprocessing


class _Model(Protocol):
    """What finding a model's inputs reads of it, and may set (a loaded model,
    :class:`actviz.models.LoadedModel`)."""

    name: str
    preprocess: Preprocessing


__all__ = ["CLIPS", "IMAGES", "PAIRS", "Inputs"]


def _no_note(path: Path) -> str | None:
    """Nothing to say of an input."""
    return None


@dataclass(frozen=True)
class Inputs:
    """What a family's models take.

    Attributes:
        key: ``images``, ``clips`` or ``pairs``.
        unit: One of them, as progress and summaries count it (``clip``).
        units: Several of them (``clips``).
        skipped: What a file skipped for not being one is (``non-video``).
        noun: How a refusal names them (``pairs of images``).
        images: Single images: what every command's opening finds before a model is loaded,
            and all the Ray engine's workers decode. Clips and pairs are found once the model
            is loaded.
        find: The inputs of a loaded model among the paths it was given (and what the
            opening found of them already); it may set what the model's preprocessing needs
            to read them (a pair's second picture).
        note: What an input's record and the run's warnings say of it, from its path alone
            (an animated GIF given to an image model: its first frame is drawn); None when
            nothing.
    """

    key: str
    unit: str
    units: str
    skipped: str
    noun: str
    images: bool
    find: Callable[[_Model, Sequence[Path], Discovery], Discovery]
    note: Callable[[Path], str | None] = _no_note


def _images(loaded: _Model, paths: Sequence[Path], found: Discovery) -> Discovery:
    """Images (``found`` when the opening walked them already).

    Raises:
        UsageError: A video file named to an image model, or no image.
    """

    _refuse_videos(loaded.name, paths)
    return (found if found.images else discover(paths)).require(paths)


def _clips(loaded: _Model, paths: Sequence[Path], found: Discovery) -> Discovery:
    """Clips: video files, animations, folders of frames (still images are refused)."""

    return discover_clips(paths)


def _pairs(loaded: _Model, paths: Sequence[Path], found: Discovery) -> Discovery:
    """Pairs of consecutive pictures (one image alone is refused), their partners set on the
    model's preprocessing."""

    pairs, partners = discover_pairs(paths)
    if isinstance(loaded.preprocess, PairPreprocessing):
        loaded.preprocess = loaded.preprocess.with_partners(partners)
    return pairs


def _refuse_videos(model: str, paths: Sequence[Path]) -> None:
    """A video file named to an image model is refused: one of its frames alone would be
    drawn as if it were the input. An animated GIF or WebP is an image file (Pillow opens
    its first frame, and a folder of photos may hold one): its first frame is drawn, and the
    run says so (:func:`actviz.io.video.animation_note`)."""

    video = next((p for p in paths if p.suffix.lower() in VIDEO_SUFFIXES), None)
    if video is not None:
        raise UsageError(
            f"{video} is a video, and {model} takes images: pass image files or folders, or a "
            "video model (r3d_18, mvit_v2_s, ...; a model whose first convolution is Conv3d "
            "or that sets actviz_family = 'video')"
        )


def _image_note(path: Path) -> str | None:
    """An animated GIF or WebP: its first frame is drawn."""

    return animation_note(path)


#: Single images: image files and folders of them.
IMAGES = Inputs("images", "image", "images", "non-image", "images", True, _images, _image_note)
#: Clips sampled from video files, animations or folders of frames.
CLIPS = Inputs("clips", "clip", "clips", "non-video", "clips", False, _clips)
#: Pairs: two images, or consecutive frames of a video or of a folder of frames.
PAIRS = Inputs("pairs", "pair", "pairs", "non-image", "pairs of images", False, _pairs)
