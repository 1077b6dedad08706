"""``top-images --sae``: a sparse dictionary's features ranked like channels. The dictionary's
layer is planned as usual, then its plan is replaced by one of ``F`` feature maps of the same
size, and the scoring hook encodes the layer's maps position by position before it scores."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from actviz.errors import UsageError
from actviz.top_images.plan import Planned, as_maps

if TYPE_CHECKING:
    import torch

    from actviz.dictionary import SparseDictionary

__all__ = ["Transform", "dictionary_layer", "feature_plans"]

Transform = Callable[["torch.Tensor"], "torch.Tensor | None"]


def dictionary_layer(dictionary: SparseDictionary) -> tuple[str, str]:
    """The capture key and module of the layer a dictionary was trained on."""
    layer = dictionary.config.get("layer") or {}
    return str(layer.get("key")), str(layer.get("module"))


def feature_plans(
    planned: Planned, dictionary: SparseDictionary, key: str, source: Path
) -> dict[str, Transform]:
    """Keep only the dictionary's layer among the plans, planned as its features (in place);
    the transform that makes its output feature maps.

    Raises:
        UsageError: When the layer is not planned, or its channels differ from the
            dictionary's.
    """
    plan = planned.plans.get(key)
    if plan is None or plan.channels != dictionary.channels:
        found = f"{plan.channels} channels" if plan is not None else "not among the layers"
        raise UsageError(
            f"--sae {source} was trained on {key} with {dictionary.channels} channels, and that "
            f"layer is {found} here; use the model and --input-size it was trained with"
        )
    features = dataclasses.replace(
        plan,
        channels=dictionary.features,
        shape=(dictionary.features, plan.height, plan.width),
        mode="nchw",
        index=None,
        layout="features",
        note=f"{dictionary.features} features (k {dictionary.k}) of a dictionary over "
        f"{plan.channels} channels",
    )
    planned.plans.clear()
    planned.plans[key] = features

    def encode(tensor: torch.Tensor) -> torch.Tensor | None:
        if tuple(tensor.shape[1:]) != plan.shape:
            return None
        return dictionary.encode_maps(as_maps(tensor.detach(), plan).float())

    return {key: encode}
