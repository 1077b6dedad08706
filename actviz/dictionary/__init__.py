"""A sparse dictionary of one layer (a TopK sparse autoencoder): its weights and config, the
one file format (``sae.safetensors``, read with :func:`load_dictionary`, never pickle), and how
it turns a layer's output into feature maps. Trained by ``actviz sae``, whose files and
options are named after the command; applied by ``run --sae`` and ``top-images --sae``.
Imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz import _moved
from actviz.dictionary.file import FORMAT, check_fit, dictionary_bytes, load_dictionary
from actviz.dictionary.model import SparseDictionary

__all__ = ["FORMAT", "SparseDictionary", "check_fit", "dictionary_bytes", "load_dictionary"]

if not TYPE_CHECKING:  # an old name warns; the type checker knows only the new ones

    def __getattr__(name: str) -> Any:
        return _moved.moved_name(__name__, name)
