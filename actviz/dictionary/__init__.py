"""A sparse dictionary of one layer (a TopK sparse autoencoder): its weights and config, the
one file format (``sae.safetensors``, read with :func:`load_sae`, never pickle), and how it
turns a layer's output into feature maps. Trained by ``actviz sae``; applied by ``run --sae``
and ``top-images --sae``. Imports no torch.
"""

from __future__ import annotations

from actviz.dictionary.file import FORMAT, check_fit, load_sae, sae_bytes
from actviz.dictionary.model import SparseDictionary

__all__ = ["FORMAT", "SparseDictionary", "check_fit", "load_sae", "sae_bytes"]
