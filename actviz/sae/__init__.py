"""Sparse dictionaries of a layer over a folder: ``actviz sae`` trains a TopK sparse
autoencoder on one layer's activation vectors, streamed from the model's forward passes,
measures it on held-out images, matches features across seeds, and writes a page per
feature (built with the top-images machinery). Importing this package imports no torch.
"""

from __future__ import annotations

from actviz.command.package import callable_package
from actviz.sae.options import SaeOptions as SaeOptions
from actviz.sae.pipeline import sae as sae
from actviz.sae.result import SaeResult as SaeResult

__all__ = ["SaeOptions", "SaeResult", "sae"]

callable_package(__name__, sae)
