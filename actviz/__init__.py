"""actviz: look inside a neural network from the command line.

Importing actviz does not import torch: the public functions are re-exported lazily, so
``actviz --help`` stays instant.

Example:
    >>> import actviz
    >>> with actviz.capture(model, "conv") as acts:
    ...     model(x)
    >>> grid = actviz.render_activation(acts["layer1.0.conv1"][0], title="layer1.0.conv1")
    >>> grid.to_pil().save("layer1.png")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from actviz import _moved
from actviz._version import __version__ as __version__

# Old import paths (actviz.examples, actviz.images, ...) keep working for one release.
_moved.install()

if TYPE_CHECKING:
    from actviz.ablate import ablate as ablate
    from actviz.api import list_layers, read_images, render_activation, run
    from actviz.atlas import atlas as atlas
    from actviz.attribute import attribute as attribute
    from actviz.cam_eval import cam_eval
    from actviz.dictionary import load_dictionary
    from actviz.diff import diff as diff
    from actviz.errors import ActvizError
    from actviz.hooks import ActivationRecorder, capture
    from actviz.label import label as label
    from actviz.models import load_model
    from actviz.monitor.log import read_log
    from actviz.monitor.watch import watch
    from actviz.notebook import browse, show
    from actviz.optimize import optimize as optimize
    from actviz.run.pca import pca_view
    from actviz.sae import sae as sae
    from actviz.selectors import select_layers
    from actviz.stats import stats as stats
    from actviz.tcav import tcav as tcav
    from actviz.top_images import top_images

__all__ = [
    "ActivationRecorder",
    "ActvizError",
    "__version__",
    "ablate",
    "atlas",
    "attribute",
    "browse",
    "cam_eval",
    "capture",
    "diff",
    "label",
    "list_layers",
    "load_dictionary",
    "load_model",
    "optimize",
    "pca_view",
    "read_images",
    "read_log",
    "render_activation",
    "run",
    "sae",
    "select_layers",
    "show",
    "stats",
    "tcav",
    "top_images",
    "watch",
]

_LAZY = {
    "ActivationRecorder": "actviz.hooks",
    "ablate": "actviz.ablate",
    "atlas": "actviz.atlas",
    "attribute": "actviz.attribute",
    "browse": "actviz.notebook",
    "cam_eval": "actviz.cam_eval",
    "capture": "actviz.hooks",
    "diff": "actviz.diff",
    "ActvizError": "actviz.errors",
    "label": "actviz.label",
    "list_layers": "actviz.api",
    "load_dictionary": "actviz.dictionary",
    "load_model": "actviz.models",
    "optimize": "actviz.optimize",
    "pca_view": "actviz.run.pca",
    "read_images": "actviz.api",
    "read_log": "actviz.monitor",
    "render_activation": "actviz.api",
    "run": "actviz.api",
    "sae": "actviz.sae",
    "select_layers": "actviz.selectors",
    "show": "actviz.notebook",
    "stats": "actviz.stats",
    "tcav": "actviz.tcav",
    "top_images": "actviz.top_images",
    "watch": "actviz.monitor",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        return _moved.moved_name(__name__, name)  # an old name warns; others: AttributeError
    return getattr(importlib.import_module(module), name)
