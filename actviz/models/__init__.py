"""Models: the registry of torchvision names, pretrained weights, checkpoints, the user's own
factories, input preprocessing, devices, default selectors and layer listings."""

from __future__ import annotations

from actviz.models.checkpoints import (
    load_checkpoint as load_checkpoint,
)
from actviz.models.defaults import (
    default_selector as default_selector,
)
from actviz.models.devices import (
    resolve_device as resolve_device,
)
from actviz.models.factories import (
    build_user_model as build_user_model,
)
from actviz.models.factories import (
    is_factory_spec as is_factory_spec,
)
from actviz.models.factories import (
    load_factory as load_factory,
)
from actviz.models.factories import (
    split_factory_spec as split_factory_spec,
)
from actviz.models.listing import (
    LayerInfo as LayerInfo,
)
from actviz.models.listing import (
    LayerListing as LayerListing,
)
from actviz.models.listing import (
    list_layers as list_layers,
)
from actviz.models.preprocessing import (
    IMAGENET_MEAN as IMAGENET_MEAN,
)
from actviz.models.preprocessing import (
    IMAGENET_STD as IMAGENET_STD,
)
from actviz.models.preprocessing import (
    Preprocessing as Preprocessing,
)
from actviz.models.pretrained import (
    cached_weights_path as cached_weights_path,
)
from actviz.models.registry import (
    LoadedModel as LoadedModel,
)
from actviz.models.registry import (
    WeightsInfo as WeightsInfo,
)
from actviz.models.registry import (
    architecture_kwargs as architecture_kwargs,
)
from actviz.models.registry import (
    build_architecture as build_architecture,
)
from actviz.models.registry import (
    list_model_names as list_model_names,
)
from actviz.models.registry import (
    load_model as load_model,
)
