"""Video models in a run: ``--frames`` sets their clips' length, which a resumed run must
match. Their layers are drawn as time strips (a layer kind, :mod:`actviz.run.pictures`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError
from actviz.models.clips import ClipPreprocessing
from actviz.models.families import VIDEO
from actviz.models.families.video import clip_length_refusal
from actviz.run.families.base import FamilyOption, RunFamily

if TYPE_CHECKING:
    from actviz.models import LoadedModel
    from actviz.run.options import RunOptions

__all__ = ["VIDEO_RUN"]


def _frames(loaded: LoadedModel, frames: int) -> None:
    """Clips of ``frames`` frames (at least 1), refused before the run when the model cannot
    take that many (it says how many it takes)."""

    before = loaded.preprocess
    assert isinstance(before, ClipPreprocessing)  # the family's preprocessing
    loaded.preprocess = before.with_frames(frames)
    clip = (before.channels, *before.crop_size)
    refusal = clip_length_refusal(loaded.name, loaded.module, frames, before.frames, clip)
    if refusal is not None:
        raise UsageError(refusal)


def _settings(loaded: LoadedModel, opts: RunOptions) -> dict[str, Any]:
    """The clips' length."""
    return {"clip": [getattr(loaded.preprocess, "frames", None), None]}


VIDEO_RUN = RunFamily(
    VIDEO,
    options=(
        FamilyOption(
            "frames", apply=_frames, refusal="--frames is for video models; {model} takes no clips"
        ),
    ),
    settings=_settings,
)
