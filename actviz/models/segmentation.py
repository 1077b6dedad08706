"""What a segmentation model's output means: which module gives the class logits, and the
class of each of its channels.

torchvision's segmentation models (FCN, DeepLabV3, LR-ASPP) end in a ``classifier`` head with
one output channel per class; the model upsamples that output bilinearly to the input size and
returns it as ``out`` (and ``aux`` from ``aux_classifier``). Hooks see the head, not the
upsampled result, so the head is where class names belong and where the per-pixel class map
can be computed from. Hugging Face's ``...ForSemanticSegmentation`` models (SegFormer, BEiT,
UperNet, ...) return their head's class logits at a fraction of the input size; their logits
module is the head's last convolution with one output channel per class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from actviz.contexts import type_names

if TYPE_CHECKING:
    from torch import nn

__all__ = ["class_channel_names", "output_classes", "segmentation_logits"]

#: Model classes whose ``classifier`` (and ``aux_classifier``) heads give class logits.
_SEGMENTATION_MODELS = frozenset({"_SimpleSegmentationModel", "LRASPP"})
_HEADS = ("classifier", "aux_classifier")


def segmentation_logits(model: nn.Module, head: str = "classifier") -> str | None:
    """The module whose output is the model's class logits, before upsampling.

    ``classifier.4`` for FCN and DeepLabV3 (the last convolution of the head, so the default
    selector of convolutions captures it), ``classifier`` for LR-ASPP (its head adds two
    convolutions' outputs), ``decode_head.classifier`` for SegFormer. None for a model that
    is not a torchvision or Hugging Face semantic segmentation model.

    Args:
        model: Any ``nn.Module``.
        head: ``classifier``, or ``aux_classifier`` for the auxiliary head.
    """
    from torch import nn

    if head == "classifier" and _hugging_face_segmentation(model):
        return _hugging_face_logits(model)
    if not type_names(model) & _SEGMENTATION_MODELS:
        return None
    module = getattr(model, head, None)
    if not isinstance(module, nn.Module):
        return None
    if isinstance(module, nn.Sequential) and len(module) and isinstance(module[-1], nn.Conv2d):
        return f"{head}.{len(module) - 1}"
    return head


def class_channel_names(model: nn.Module, categories: Sequence[str] | None) -> dict[str, list[str]]:
    """Module name -> the class name of each output channel, for modules whose channels
    are a segmentation model's classes.

    The heads themselves and every convolution in them with one output channel per class
    (LR-ASPP's ``low_classifier`` and ``high_classifier`` add up to its logits).

    Args:
        model: Any ``nn.Module``; only torchvision segmentation models get names.
        categories: The class names of the model's weights (``meta["categories"]``).

    Returns:
        An empty mapping when the model is not a segmentation model, there are no names, or
        the heads' channels do not match them (a checkpoint with classes of its own).
    """
    from torch import nn

    if categories and _hugging_face_segmentation(model):
        logits = _hugging_face_logits(model)
        conv = model.get_submodule(logits) if logits is not None else None
        if (
            logits is None
            or not isinstance(conv, nn.Conv2d)
            or conv.out_channels != len(categories)
        ):
            return {}
        return {logits: [str(c) for c in categories]}
    if not categories or not type_names(model) & _SEGMENTATION_MODELS:
        return {}
    names = [str(c) for c in categories]
    found: dict[str, list[str]] = {}
    for head in _HEADS:
        logits = segmentation_logits(model, head)
        module = getattr(model, head, None)
        if logits is None or not isinstance(module, nn.Module):
            continue
        convs = {
            f"{head}.{name}" if name else head: child
            for name, child in module.named_modules()
            if isinstance(child, nn.Conv2d) and child.out_channels == len(names)
        }
        if logits not in convs and logits != head:
            continue  # the head's last layer has another number of channels
        if logits == head and not convs:
            continue
        found[head] = names
        for name in convs:
            found[name] = names
    if "classifier" not in found:
        return {}
    return found


def _hugging_face_segmentation(model: nn.Module) -> bool:
    return type(model).__name__.endswith("ForSemanticSegmentation")


def _hugging_face_logits(model: nn.Module) -> str | None:
    """The last convolution with ``config.num_labels`` output channels, in the decode head
    when there is one (an auxiliary head comes after it in BEiT and UperNet)."""
    from torch import nn

    classes = getattr(getattr(model, "config", None), "num_labels", None)
    convs = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Conv2d) and module.out_channels == classes and name
    ]
    decode = [name for name in convs if name.startswith("decode_head.")]
    found = decode or convs
    return found[-1] if found else None


def output_classes(module: nn.Module) -> int | None:
    """How many classes the model scores: a segmentation head's output channels, else the
    last linear layer's outputs; None without either."""
    from torch import nn

    logits = segmentation_logits(module)
    if logits is not None:  # the classes are the head's output channels
        convs = [m for m in module.get_submodule(logits).modules() if isinstance(m, nn.Conv2d)]
        return convs[-1].out_channels if convs else None
    last: nn.Linear | None = None
    for child in module.modules():
        if isinstance(child, nn.Linear):
            last = child
    return last.out_features if last is not None else None
