"""Models: the table of model sources (torchvision's registry, the user's own factories),
pretrained weights, checkpoints, input preprocessing, devices, default selectors and layer
listings."""

from __future__ import annotations

from actviz.models.checkpoints import load_checkpoint
from actviz.models.defaults import default_selector
from actviz.models.devices import resolve_device
from actviz.models.factories import (
    FactorySpec,
    build_user_model,
    factory_module_importable,
    is_factory_spec,
    load_factory,
    parse_factory_spec,
)
from actviz.models.listing import LayerInfo, LayerListing, fold_never_ran, list_layers
from actviz.models.preprocessing import IMAGENET_MEAN, IMAGENET_STD, MAX_ASPECT, Fit, Preprocessing
from actviz.models.pretrained import cached_weights_path
from actviz.models.registry import (
    LoadedModel,
    ModelEntry,
    WeightsInfo,
    architecture_kwargs,
    build_architecture,
    check_model_name,
    list_models,
    load_model,
    load_with,
)
from actviz.models.segmentation import class_channel_names, segmentation_logits
from actviz.models.sources import SOURCES, ModelSource, source_for

__all__ = [
    "FactorySpec",
    "Fit",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "LayerInfo",
    "LayerListing",
    "LoadedModel",
    "MAX_ASPECT",
    "ModelSource",
    "SOURCES",
    "ModelEntry",
    "Preprocessing",
    "WeightsInfo",
    "architecture_kwargs",
    "build_architecture",
    "build_user_model",
    "cached_weights_path",
    "check_model_name",
    "class_channel_names",
    "default_selector",
    "factory_module_importable",
    "fold_never_ran",
    "is_factory_spec",
    "list_layers",
    "list_models",
    "load_checkpoint",
    "load_factory",
    "load_model",
    "load_with",
    "parse_factory_spec",
    "resolve_device",
    "segmentation_logits",
    "source_for",
]
