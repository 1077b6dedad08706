"""The one look of every picture actviz draws: its colours, its padding and its font sizes.

The pictures drawn in RGB (a CAM's panels, a detector's detections, a class map) take the
colours as they are; the palette pictures (grids, their headers, sheets) keep palette indices
for the same colours (:mod:`actviz.render.palette`), so a grid and the Grad-CAM beside it
look alike. Sizes are pixel sizes of the font every picture's text is drawn in
(:func:`actviz.render.legend.font`); a size is named by what it writes, so two roles that
share a size today can part later without touching the renderers.
"""

from __future__ import annotations

__all__ = [
    "BACKGROUND_RGB",
    "CAPTION_SIZE",
    "INFO_SIZE",
    "LABEL_RGB",
    "LABEL_SIZE",
    "MUTED_RGB",
    "NONFINITE_RGB",
    "PAD",
    "PAD_TOP",
    "PANEL_GAP",
    "PANEL_LABEL_SIZE",
    "ROW_LABEL_SIZE",
    "SHEET_TITLE_SIZE",
    "TEXT_RGB",
    "TILE_LABEL_SIZE",
    "TITLE_SIZE",
]

RGB = tuple[int, int, int]

# Colours.
BACKGROUND_RGB: RGB = (38, 38, 38)
"""Gaps, padding and the band behind text (dark grey)."""
TEXT_RGB: RGB = (235, 235, 235)
"""Titles, captions and a header's text (near-white)."""
MUTED_RGB: RGB = (170, 170, 170)
"""The lines under a title, and an uncoloured class's outlined swatch."""
LABEL_RGB: RGB = (205, 205, 205)
"""Text in a picture's body told apart from its header's: a tile's channel index."""
NONFINITE_RGB: RGB = (255, 0, 255)
"""NaN and infinite values (magenta)."""

# Spacing (pixels).
PAD = 6
"""Between a picture's edge and its text."""
PAD_TOP = 5
"""Above a grid header's first line."""
PANEL_GAP = 4
"""Between pictures side by side: a CAM's panels, a sheet's panels and tiles."""

# Font sizes (pixels).
TITLE_SIZE = 14
"""A grid header's title."""
SHEET_TITLE_SIZE = 15
"""The title of a sheet of RGB panels (optimized images, principal components)."""
CAPTION_SIZE = 13
"""Text drawn with RGB pictures: a CAM panel's label, a detector's and a class map's lines,
a diff's caption, a contact sheet's line about its channel."""
INFO_SIZE = 12
"""The lines under a title: description and notes."""
LABEL_SIZE = 12
"""The colour bar's labels, and a legend's beside its swatches."""
TILE_LABEL_SIZE = 12
"""The channel index above each tile."""
PANEL_LABEL_SIZE = 11
"""The text under a sheet's panels and tiles and beside its rows."""
ROW_LABEL_SIZE = 10
"""The labels beside the rows of a vector's grid."""
