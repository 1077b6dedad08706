"""``--icons fv``: each kept cell shown by a feature visualization of its mean, through the
same optimization as ``actviz optimize`` (Fourier parameterization, Lucent's transforms, Adam;
:func:`actviz.optimize.optimize_batch`) with the cell's mean as the direction to grow
(:class:`actviz.optimize.objective.Direction`), many cells in one batch."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from actviz.atlas.layout import Laid
from actviz.atlas.options import AtlasOptions
from actviz.atlas.stream import Side
from actviz.layouts import layer_contexts
from actviz.optimize import optimize_batch
from actviz.optimize.objective import Direction

__all__ = ["ICON_BATCH", "OBJECTIVE", "cell_icons"]

#: Cells optimized together.
ICON_BATCH = 32
#: What each icon maximizes, as ``atlas.json`` says it.
OBJECTIVE = (
    "the cell's mean direction: (v . m) x cos(v, m), v the layer's vector (the spatial mean, "
    "or the centre position for spatial points), m the cell's mean; Lucent's transforms and "
    "Fourier parameterization"
)


def cell_icons(side: Side, laid: Laid, opts: AtlasOptions) -> npt.NDArray[np.uint8]:
    """``(cells, size, size, 3)``: one icon per kept cell, in the cells' order."""

    loaded = side.loaded
    contexts = layer_contexts(loaded.module, loaded.input_size)
    ctx = contexts.get(side.plan.module)
    # Patch grids and attention windows hold for one input size only.
    fixed = any(c.token_grid is not None or c.windows is not None for c in contexts.values())
    pre = loaded.preprocess
    grey = pre.channels == 1
    means = laid.cells.means
    icons = np.zeros((len(means), opts.icon_size, opts.icon_size, 3), np.uint8)
    for start in range(0, len(means), ICON_BATCH):
        chunk = means[start : start + ICON_BATCH]
        result = optimize_batch(
            loaded.module,
            side.plan.module,
            list(range(start, start + len(chunk))),
            steps=opts.icon_steps,
            size=opts.icon_size,
            mean=pre.mean[:3] if not grey else [0.5] * 3,
            std=pre.std[:3] if not grey else [0.5] * 3,
            device=loaded.device,
            seed=opts.seed,
            ctx=ctx,
            grey=grey,
            model_size=loaded.input_size if fixed else None,
            objective=Direction(chunk, neuron=opts.points.kind == "spatial", ctx=ctx),
        )
        icons[start : start + len(chunk)] = result.images
    return icons
