"""The whole folder on one map: an activation atlas of one layer (``actviz atlas``).

Every image (or ``K`` positions of every image) placed by a 2-D layout of its activation
vector (PCA on the model's device, then UMAP or the first two components), the layout binned
into cells, each cell shown by its nearest real images or patches (or a feature
visualization) and labelled with the class it supports where the layer reaches a linear
readout (Carter et al., Distill 2019). A second model or checkpoint can share the map.

The package is itself callable, ``actviz.atlas(...)`` being :func:`atlas`. Importing it does
not import torch.
"""

from __future__ import annotations

from actviz.atlas.colours import COLOURINGS
from actviz.atlas.options import AtlasOptions, Colour, Points
from actviz.atlas.pipeline import atlas
from actviz.atlas.reduce import REDUCERS
from actviz.atlas.result import AtlasResult
from actviz.command.package import callable_package

__all__ = ["COLOURINGS", "REDUCERS", "AtlasOptions", "AtlasResult", "Colour", "Points", "atlas"]

callable_package(__name__, atlas)
