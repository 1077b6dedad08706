"""Dataset examples: for every channel of the selected layers, the images of a folder that
excite it most, as data (``top-images.json``), contact sheets and an HTML report.

The pieces, each usable on its own: :func:`top_images` (the whole pipeline), the mergeable
accumulator (:class:`TopK`), the per-batch step run in the forward hooks
(:func:`score_batch_candidates`), receptive fields (:func:`plan_layers`) and the pictures
(:mod:`actviz.examples.sheets`). Importing this package imports no torch.
"""

from __future__ import annotations

from actviz.examples.fields import ReceptiveField as ReceptiveField
from actviz.examples.options import ExamplesOptions as ExamplesOptions
from actviz.examples.pipeline import top_images as top_images
from actviz.examples.plan import plan_layers as plan_layers
from actviz.examples.results import TopImagesResult as TopImagesResult
from actviz.examples.scoring import score_batch_candidates as score_batch_candidates
from actviz.examples.sheets import overview as overview
from actviz.examples.topk import Candidates as Candidates
from actviz.examples.topk import LayerTop as LayerTop
from actviz.examples.topk import TopK as TopK

__all__ = [
    "Candidates",
    "ExamplesOptions",
    "LayerTop",
    "ReceptiveField",
    "TopImagesResult",
    "TopK",
    "overview",
    "plan_layers",
    "score_batch_candidates",
    "top_images",
]
