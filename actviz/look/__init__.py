"""Looking at a model from a notebook: :func:`show` (one image's layers drawn in memory, as the
command line draws them) and :func:`browse` (a channel browser, with the ``notebook`` extra).

Importing this package does not import torch.
"""

from __future__ import annotations

from actviz.look.browser import browse, channel_rgb
from actviz.look.inline import KINDS, Look, show

__all__ = ["KINDS", "Look", "browse", "channel_rgb", "show"]
