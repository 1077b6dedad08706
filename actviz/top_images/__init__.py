"""Dataset examples: for every channel of the selected layers, the images of a folder that
excite it most, as data (``top-images.json``), contact sheets and an HTML report.

The pieces, each usable on its own: :func:`top_images` (the whole pipeline), the mergeable
accumulator (:class:`TopK`), the per-batch step run in the forward hooks
(:func:`score_batch_candidates`), receptive fields (:func:`plan_layers`) and the pictures
(:mod:`actviz.top_images.sheets`). The package is itself callable, ``actviz.top_images(...)``
being :func:`top_images`. Importing this package imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz import _moved
from actviz.command.package import callable_package
from actviz.top_images.fields import ReceptiveField as ReceptiveField
from actviz.top_images.options import TopImagesOptions as TopImagesOptions
from actviz.top_images.pipeline import top_images as top_images
from actviz.top_images.plan import plan_layers as plan_layers
from actviz.top_images.results import TopImagesResult as TopImagesResult
from actviz.top_images.scoring import score_batch_candidates as score_batch_candidates
from actviz.top_images.sheets import overview as overview
from actviz.top_images.topk import Candidates as Candidates
from actviz.top_images.topk import LayerTop as LayerTop
from actviz.top_images.topk import TopK as TopK

__all__ = [
    "Candidates",
    "TopImagesOptions",
    "LayerTop",
    "ReceptiveField",
    "TopImagesResult",
    "TopK",
    "overview",
    "plan_layers",
    "score_batch_candidates",
    "top_images",
]

callable_package(__name__, top_images)

if not TYPE_CHECKING:  # an old name warns; the type checker knows only the new ones

    def __getattr__(name: str) -> Any:
        return _moved.moved_name(__name__, name)
