"""actviz in a notebook: :func:`show` (one image's layers drawn in memory, as the command line
draws them) and :func:`browse` (the channel browser, an anywidget with the ``notebook`` extra).

What a cell shows of a result (its card, its pictures) is built below every command, in
:mod:`actviz.cards`. Importing this package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz import _moved
from actviz.notebook.browser import browse, channel_rgb
from actviz.notebook.inline import KINDS, Look, show

__all__ = ["KINDS", "Look", "browse", "channel_rgb", "show"]

if not TYPE_CHECKING:  # an old name warns; the type checker knows only the new ones

    def __getattr__(name: str) -> Any:
        return _moved.moved_name(__name__, name)
