"""The user's own models as a source: ``package.module:factory`` or ``path/to/file.py:factory``.

Loading runs the user's code (see :mod:`actviz.models.factories`). The factory's weights are
kept as it built them unless ``--weights`` names a checkpoint; preprocessing is ImageNet's
standard one, and there are no class names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actviz.errors import ActvizError, ModelError, UnknownModelError
from actviz.models.checkpoints import load_checkpoint, load_state_dict_into
from actviz.models.factories import (
    build_user_model,
    factory_module_importable,
    is_factory_spec,
    load_factory,
)
from actviz.models.preprocessing import Preprocessing
from actviz.models.sources.base import Built, MetaBuild, ModelEntry
from actviz.models.sources.hints import other_source_hint
from actviz.models.weights import WeightsInfo, existing_checkpoint, seeded

if TYPE_CHECKING:
    from torch import nn

__all__ = ["FactorySource"]


class FactorySource:
    """The user's own factories: MODEL with a ``:`` or ending in ``.py``."""

    key = "factory"

    def claims(self, model: str) -> bool:
        """See :func:`~actviz.models.factories.is_factory_spec`."""
        return is_factory_spec(model)

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        """None: the user's code is not listed."""
        return []

    def check_name(self, model: str) -> None:
        """Only a timm or Hugging Face name spelled with a colon (``timm:convnext_tiny``) is
        refused before importing; :func:`load_factory` says what else is wrong."""
        _refuse_other_source(model)

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None = None,
    ) -> Built:
        """Build with the factory (seeded); ``auto`` and ``none`` keep its weights."""
        _refuse_other_source(model)
        module = seeded(lambda: build_user_model(model))
        if weights.lower() in ("auto", "none"):
            return Built(module, WeightsInfo(spec=weights, source="factory", name=model))
        path = existing_checkpoint(weights, model, "auto or none", factory=True)
        # A full pickle names the factory's classes by the module's own name.
        with factory_module_importable(model):
            state = load_checkpoint(path, trust=trust_checkpoint)
        load_state_dict_into(module, state, name=model, source=str(path))
        return Built(module, WeightsInfo(spec=weights, source="checkpoint", name=str(path)))

    def build_meta(self, model: str, input_size: tuple[int, int] | None = None) -> MetaBuild:
        """The factory's model on the meta device, or, when its code needs real tensors, a
        way to build it on the CPU (the factory is imported once for both)."""
        import torch

        _refuse_other_source(model)
        factory = load_factory(model)  # imports once; UsageError for a bad spec or path

        def on_cpu() -> nn.Module:
            with torch.device("cpu"):  # whatever default device the user's code has set
                return factory()

        try:
            with torch.device("meta"):
                return MetaBuild(factory(), on_cpu)
        except ActvizError as exc:
            if not isinstance(exc, ModelError):
                raise
        except Exception:  # the user's code may need real tensors: the CPU it is
            pass
        return MetaBuild(None, on_cpu)

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        """ImageNet's standard preprocessing, at ``input_size`` when given."""
        return Preprocessing.fitted(input_size=input_size, in_chans=in_chans).described(
            "defaults: ImageNet mean and std, resize 256, centre crop 224 (your own model)"
        )

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        """Unknown: a factory says nothing about its classes."""
        return None

    def versions(self) -> dict[str, str]:
        """Nothing beyond torch's own version."""
        return {}


#: Module parts of a factory spec that are another source's prefix written with a colon.
_OTHER_PREFIXES = ("timm", "hf", "huggingface", "hf_hub")


def _refuse_other_source(model: str) -> None:
    """``timm:convnext_tiny`` reads as module ``timm``, factory ``convnext_tiny``; when the
    name is another source's, say how that source spells it."""
    module, _, rest = model.strip().partition(":")
    if module.lower() not in _OTHER_PREFIXES or not rest:
        return
    hint = other_source_hint(model)
    if hint is not None and hint != model:
        raise UnknownModelError(
            f"'{model}' reads as the factory {rest} of module {module}; did you mean {hint}?"
        )
