"""What a notebook cell shows of actviz's results: cards (escaped HTML of a bounded size, with
inline PNG thumbnails) and pictures (``_repr_png_``), and the training log's live view.

Pure and light: plain data (a result's attributes, records of a log) in, HTML or PNG bytes out;
no torch, and nothing here writes a file. The result classes' ``_repr_html_`` and ``__repr__``
call into it; the notebook face, :mod:`actviz.notebook` (``actviz.show``, ``actviz.browse``),
builds on it.
"""

from __future__ import annotations

from actviz.cards.ablate import ablate_card
from actviz.cards.attribute import attribute_card
from actviz.cards.cam_eval import cam_eval_card
from actviz.cards.card import CARD_MAX_BYTES, MAX_ROWS, MAX_THUMBS, Card, Table, Thumb
from actviz.cards.concepts import label_card, tcav_card
from actviz.cards.dictionary import dictionary_card
from actviz.cards.picture import Picture, picture_of, rgb_png, side_by_side
from actviz.cards.results import (
    RANDOM_WARNING,
    atlas_card,
    diff_card,
    listing_card,
    optimize_card,
    run_card,
    top_images_card,
)
from actviz.cards.thumbs import THUMB_BOX, fit_size, thumb_from_array, thumb_from_file
from actviz.cards.training import (
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
    "ablate_card",
    "atlas_card",
    "attribute_card",
    "cam_eval_card",
    "TrainingState",
    "diff_card",
    "fit_size",
    "label_card",
    "listing_card",
    "log_state",
    "optimize_card",
    "picture_of",
    "rgb_png",
    "run_card",
    "dictionary_card",
    "side_by_side",
    "tcav_card",
    "thumb_from_array",
    "thumb_from_file",
    "top_images_card",
    "training_card",
]
