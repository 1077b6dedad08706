"""Models: the registry of torchvision names, pretrained weights, checkpoints, the user's own
factories, input preprocessing, devices, default selectors and layer listings."""

from __future__ import annotations

from actviz.models.checkpoints import load_checkpoint
from actviz.models.defaults import default_selector
from actviz.models.devices import resolve_device
from actviz.models.factories import (
    build_user_model,
    is_factory_spec,
    load_factory,
    split_factory_spec,
)
from actviz.models.listing import LayerInfo, LayerListing, list_layers
from actviz.models.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from actviz.models.pretrained import cached_weights_path
from actviz.models.registry import (
    LoadedModel,
    WeightsInfo,
    architecture_kwargs,
    build_architecture,
    list_model_names,
    load_model,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "LayerInfo",
    "LayerListing",
    "LoadedModel",
    "Preprocessing",
    "WeightsInfo",
    "architecture_kwargs",
    "build_architecture",
    "build_user_model",
    "cached_weights_path",
    "default_selector",
    "is_factory_spec",
    "list_layers",
    "list_model_names",
    "load_checkpoint",
    "load_factory",
    "load_model",
    "resolve_device",
    "split_factory_spec",
]
