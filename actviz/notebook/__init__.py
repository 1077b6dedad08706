"""What a notebook cell shows of actviz's results: cards (escaped HTML of a bounded size, with
inline PNG thumbnails) and pictures (``_repr_png_``), and the training log's live view.

Pure and light: plain data (a result's attributes, records of a log) in, HTML or PNG bytes out;
no torch, and nothing here writes a file. The result classes' ``_repr_html_`` and ``__repr__``
call into it; ``actviz.look`` (``actviz.show``, ``actviz.browse``) builds on it.
"""

from __future__ import annotations

from actviz.notebook.attribution import attribute_card
from actviz.notebook.card import CARD_MAX_BYTES, MAX_ROWS, MAX_THUMBS, Card, Table, Thumb
from actviz.notebook.cards import (
    RANDOM_WARNING,
    atlas_card,
    diff_card,
    listing_card,
    optimize_card,
    run_card,
    top_images_card,
)
from actviz.notebook.dictionary import sae_card
from actviz.notebook.picture import Picture, picture_of, rgb_png, side_by_side
from actviz.notebook.thumbs import THUMB_BOX, fit_size, thumb_from_array, thumb_from_file
from actviz.notebook.training import (
    LiveView,
    LogFollower,
    TrainingState,
    log_state,
    training_card,
)

__all__ = [
    "CARD_MAX_BYTES",
    "MAX_ROWS",
    "MAX_THUMBS",
    "RANDOM_WARNING",
    "THUMB_BOX",
    "Card",
    "LiveView",
    "LogFollower",
    "Picture",
    "Table",
    "Thumb",
    "TrainingState",
    "atlas_card",
    "attribute_card",
    "diff_card",
    "fit_size",
    "listing_card",
    "log_state",
    "optimize_card",
    "picture_of",
    "rgb_png",
    "run_card",
    "sae_card",
    "side_by_side",
    "thumb_from_array",
    "thumb_from_file",
    "top_images_card",
    "training_card",
]
