"""Which layers to draw when the user names none: a default selector per model family.

Each family gets the layers whose pictures say most about it: convolutions for CNNs, the
patch embedding and encoder blocks for ViTs, stage outputs for hierarchical transformer-era
backbones (Swin, ConvNeXt, from any source: found by their role, numbered stages that
normalize their channels with LayerNorm, not by class name), the stem and layers for MaxViT,
and numbered blocks or every leaf for anything else.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from actviz.contexts import layer_contexts, type_names
from actviz.hooks import layer_refs
from actviz.models.families import family_of
from actviz.models.segmentation import segmentation_logits
from actviz.selectors import TYPE_ALIASES

if TYPE_CHECKING:
    from torch import nn

    from actviz.selectors import LayerRef

__all__ = ["PATCH_MEAN_READOUTS", "default_selector"]

#: Classifiers that read the mean of the final patch tokens beside the class token
#: (``Dinov2ForImageClassification`` concatenates both): every token output, the last block's
#: and the final norm's included, reaches their readout, so Grad-CAM is right at the last one.
PATCH_MEAN_READOUTS = frozenset(
    {"Dinov2ForImageClassification", "Dinov2WithRegistersForImageClassification"}
)


def default_selector(model: nn.Module) -> str:
    """A ``--layers`` selector that draws something meaningful for this model family.

    Convolutions for CNNs (without auxiliary heads that never run in eval mode, with a
    segmentation model's class-logits head); the patch embedding and each encoder block for
    ViTs and each block for MViT; the stage outputs for Swin (Swin3D too) and ConvNeXt
    (``features.N`` in torchvision, ``stages.N`` or ``layers.N`` in timm and Hugging Face);
    RAFT's two encoders and its update block at each iteration; the stem and each layer for
    MaxViT; otherwise the items of the first numbered block list, or every leaf module.

    Args:
        model: Any ``nn.Module``.

    Returns:
        A selector string for :func:`actviz.selectors.select_layers`.
    """

    own = family_of(model).selector(model)
    if own is not None:  # a family's own view (a detector's stages and FPN levels)
        return own
    refs = layer_refs(model)
    names = {ref.name for ref in refs}
    types = {t for ref in refs for t in ref.types}
    family = type_names(model)

    if "VisionTransformer" in family and "EncoderBlock" in types:
        return "conv_proj,EncoderBlock" if "conv_proj" in names else "EncoderBlock"
    if "MViT" in family and "MultiscaleBlock" in types:  # video transformer: each block
        return "conv_proj,MultiscaleBlock" if "conv_proj" in names else "MultiscaleBlock"
    if "RAFT" in family:  # both encoders, then the update block at each iteration
        return ",".join(
            n for n in ("feature_encoder", "context_encoder", "update_block") if n in names
        )
    if family & {"SwinTransformer", "SwinTransformer3d", "ConvNeXt"}:
        # torchvision names the stages features.N, timm stages.N (ConvNeXt) or layers.N (Swin).
        for stages in ("features", "stages", "layers"):
            if any(re.fullmatch(rf"{stages}\.\d+", n) for n in names):
                return rf"re:^{stages}\.\d+$"
    hierarchy = _normalized_stages(model)
    if hierarchy is not None:
        # A segmentation model's class logits as well: its class map is drawn from them.
        head = segmentation_logits(model)
        then = f",{head}" if head is not None and _selectable(head) else ""
        return rf"re:^{re.escape(hierarchy)}\.\d+${then}"
    tokens = _token_blocks(model, refs)
    if tokens is not None:
        return tokens
    if "MaxVit" in family and "MaxVitLayer" in types:
        return "stem,MaxVitLayer" if "stem" in names else "MaxVitLayer"
    blocks = _blocks_after_convs(model, refs)
    if blocks is not None:
        return blocks
    if any(ref.leaf and TYPE_ALIASES["conv"].intersection(ref.types) for ref in refs):
        # Auxiliary classifiers (Inception, GoogLeNet) only run in training mode.
        aux = [ref.name for ref in refs if "InceptionAux" in ref.types and _selectable(ref.name)]
        # A segmentation model's class logits, even where no convolution alone gives them
        # (LR-ASPP's head adds two): the tiles named by class, and the class map.
        logits = segmentation_logits(model)
        extra = [logits] if logits is not None and _selectable(logits) else []
        return ",".join(["conv", *extra, *(f"!{name}.*" for name in aux)])
    blocks = _numbered_blocks(model)
    if blocks is not None:
        return rf"re:^{re.escape(blocks)}\.\d+$"
    return "all"


def _token_blocks(model: nn.Module, refs: list[LayerRef]) -> str | None:
    """For a transformer read out from prefix tokens (timm's and Hugging Face's ViTs, DeiT,
    DINOv2): its patch projection and each numbered block, as for torchvision's ViT."""

    if not any(ctx.prefix_tokens for ctx in layer_contexts(model).values()):
        return None
    blocks = _numbered_blocks(model)
    if blocks is None:
        return None

    convs = [r.name for r in refs if r.leaf and TYPE_ALIASES["conv"].intersection(r.types)]
    terms = [convs[0]] if len(convs) == 1 and _selectable(convs[0]) else []
    return ",".join([*terms, rf"re:^{re.escape(blocks)}\.\d+$"])


def _blocks_after_convs(model: nn.Module, refs: list[LayerRef]) -> str | None:
    """For a model whose blocks hold no convolution (MLP-Mixer, gMLP, ResMLP, Hiera, SAM's
    ViT, CrossViT, a ViT after a convolutional stem): its convolutions (the patch embedding,
    a stem, a neck) and each block of the first such list of numbered blocks, where the
    convolutions alone would draw only the stem."""

    convs = [r.name for r in refs if r.leaf and TYPE_ALIASES["conv"].intersection(r.types)]
    if not convs:
        return None
    lists = _numbered_lists(model)
    for name in lists:
        nested = any(name.startswith(f"{outer}.") for outer in lists)
        if not nested and not any(conv.startswith(f"{name}.") for conv in convs):
            return rf"conv,re:^{re.escape(name)}\.\d+$"
    return None


def _normalized_stages(model: nn.Module) -> str | None:
    """The container of a hierarchical backbone's stages: two or more numbered children whose
    classes are named ``...Stage`` and that hold a LayerNorm (Hugging Face's Swin, ConvNeXt,
    FocalNet stages; a ResNet's stages, with batch norms only, keep the convolutions)."""
    for name, module in model.named_modules():
        children = list(module.named_children())
        if not name or len(children) < 2 or not _selectable(name):
            continue
        if not all(
            key.isdigit() and type(child).__name__.endswith("Stage") for key, child in children
        ):
            continue
        if all(
            any("LayerNorm" in type(part).__name__ for part in child.modules())
            for _, child in children
        ):
            return str(name)
    return None


def _selectable(name: str) -> bool:
    # The selector syntax splits on commas, and a glob would misread its own special characters.
    return not set(name) & set(",*?[]!")


def _numbered_blocks(model: nn.Module) -> str | None:
    """The first container holding two or more numbered blocks of one class."""
    return next(iter(_numbered_lists(model)), None)


def _numbered_lists(model: nn.Module) -> list[str]:
    """Every container holding two or more numbered blocks of one class, in module order."""
    found: list[str] = []
    for name, module in model.named_modules():
        if not name or not _selectable(name):
            continue
        children = list(module.named_children())
        if len(children) < 2 or not all(key.isdigit() for key, _ in children):
            continue
        kinds = {type(child) for _, child in children}
        if len(kinds) == 1 and next(iter(children[0][1].children()), None) is not None:
            found.append(str(name))
    return found
