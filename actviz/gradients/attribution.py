"""What every attribution method takes and gives: its settings (:class:`AttributionSettings`),
one batch's work (:class:`AttributionJob`), and its answer (:class:`Attribution`): the
attributions at the input, each image's target score and each image's axiom.

An attribution has the input's shape, ``(B, C, H, W)`` (attention rollout's has one channel
on the patch grid); :func:`to_maps` reduces it to one map per image (signed methods by the
sum over channels, which keeps the total; the others by the largest magnitude over channels,
as Simonyan et al. 2014 draw a saliency map), and :func:`unit_maps` to maps in ``[0, 1]``
where the positive evidence ranks first, as cam-eval scores a CAM.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.errors import UsageError
from actviz.gradients.methods import scale_cams
from actviz.io.loader import decode_batches

if TYPE_CHECKING:
    import torch
    from torch import nn

    from actviz.models.preprocessing import Preprocessing

__all__ = [
    "BASELINES",
    "COMPOSITES",
    "HEAD_FUSIONS",
    "INTEGRATIONS",
    "Attribution",
    "AttributionJob",
    "AttributionSettings",
    "Integration",
    "baseline_image",
    "to_maps",
    "unit_maps",
]

Integration = Literal[
    "gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_middle", "riemann_right"
]
#: The rules of the path integral, as captum names them (captum's default first).
INTEGRATIONS: tuple[str, ...] = (
    "gausslegendre",
    "riemann_trapezoid",
    "riemann_left",
    "riemann_middle",
    "riemann_right",
)
#: The baselines IG takes by name; any other value is an image file.
BASELINES: tuple[str, ...] = ("zero", "blur", "mean")
#: zennit's composites by its own names (``zennit.composites.COMPOSITES``) that need no more
#: than the input's bounds.
COMPOSITES: tuple[str, ...] = (
    "epsilon_plus_flat",
    "epsilon_plus",
    "epsilon_gamma_box",
    "epsilon_alpha2_beta1",
    "epsilon_alpha2_beta1_flat",
)
#: How attention rollout fuses a block's heads.
HEAD_FUSIONS: tuple[str, ...] = ("mean", "max", "min")
#: The blur baseline's Gaussian sigma, as a fraction of the input's shorter side.
BLUR_SIGMA = 0.05


@dataclass(frozen=True)
class AttributionSettings:
    """How the attribution methods run; each reads its own fields.

    Attributes:
        steps: Integrated Gradients: points of the path integral.
        integration: Integrated Gradients: the rule (:data:`INTEGRATIONS`; captum's default,
            Gauss-Legendre, first).
        baseline: Integrated Gradients: ``zero`` (zero in the model's input space, after
            normalization, as captum's default: the dataset's mean colour for ImageNet
            models), ``blur`` (the input under a Gaussian of sigma 5% of its shorter side),
            ``mean`` (each image's own mean colour), or an image file (preprocessed as the
            inputs are).
        samples: SmoothGrad: noisy copies of each input.
        noise: SmoothGrad: the noise's standard deviation, as a fraction of each input's
            value range (max - min) in the model's input space.
        seed: SmoothGrad: the seed of each image's noise (the same seed gives the same map).
        composite: LRP: zennit's composite of rules (:data:`COMPOSITES`).
        head_fusion: Attention rollout: how a block's heads are fused (``mean``, ``max``,
            ``min``; gradient rollout always takes the mean).
        discard_ratio: Attention rollout: the share of each fused attention matrix's lowest
            weights set to 0 before the rollout (0: none, as Abnar & Zuidema; vit-explain
            uses 0.9).
    """

    steps: int = 32
    integration: Integration = "gausslegendre"
    baseline: str = "zero"
    samples: int = 16
    noise: float = 0.15
    seed: int = 0
    composite: str = "epsilon_plus_flat"
    head_fusion: Literal["mean", "max", "min"] = "mean"
    discard_ratio: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= 10_000:
            raise UsageError(f"--steps must be between 1 and 10000, got {self.steps}")
        if self.integration not in INTEGRATIONS:
            raise UsageError(
                f"--integration takes one of {', '.join(INTEGRATIONS)}, not '{self.integration}'"
            )
        if self.integration != "gausslegendre" and self.steps < 2:
            raise UsageError(f"--integration {self.integration} needs --steps of at least 2")
        baseline = str(self.baseline)
        if baseline.lower() in BASELINES:
            baseline = baseline.lower()
        elif not Path(baseline).is_file():
            raise UsageError(
                f"--baseline takes {', '.join(BASELINES)} or an image file; {baseline!r} is "
                "none of them"
            )
        object.__setattr__(self, "baseline", baseline)
        if not 1 <= self.samples <= 10_000:
            raise UsageError(f"--samples must be between 1 and 10000, got {self.samples}")
        if not (math.isfinite(self.noise) and 0 <= self.noise <= 10):
            raise UsageError(f"--noise must be between 0 and 10 (a fraction), got {self.noise}")
        composite = str(self.composite).lower().replace("-", "_")
        if composite not in COMPOSITES:
            raise UsageError(
                f"--composite takes one of {', '.join(COMPOSITES)}, not '{self.composite}'"
            )
        object.__setattr__(self, "composite", composite)
        if self.head_fusion not in HEAD_FUSIONS:
            raise UsageError(
                f"--head-fusion takes one of {', '.join(HEAD_FUSIONS)}, not '{self.head_fusion}'"
            )
        if not (math.isfinite(self.discard_ratio) and 0 <= self.discard_ratio < 1):
            raise UsageError(
                f"--discard-ratio must be at least 0 and below 1, got {self.discard_ratio}"
            )

    def describe(self, fields: Sequence[str]) -> dict[str, Any]:
        """The settings named in ``fields`` (those a method's row says it reads: its
        :attr:`~actviz.gradients.registry.MapMethod.settings`), for the record."""
        return {name: getattr(self, name) for name in fields}


@dataclass(frozen=True)
class AttributionJob:
    """One batch for an attribution method.

    Attributes:
        model: A classifier returning ``(B, K)`` logits, in eval mode.
        x: ``(B, C, H, W)`` input batch on the model's device.
        targets: The class to explain, per image.
        settings: The methods' settings.
        batch_size: Inputs per forward and backward: Integrated Gradients' steps and
            SmoothGrad's noisy copies go through the model in chunks of this many, so memory
            stays that of one batch whatever ``steps`` or ``samples``.
        baseline: The baseline image, ``(C, H, W)``, when ``settings.baseline`` is a file
            (:func:`baseline_image`).
        mean, std: The model's input normalization (LRP's input bounds).
    """

    model: nn.Module
    x: torch.Tensor
    targets: Sequence[int]
    settings: AttributionSettings = field(default_factory=AttributionSettings)
    batch_size: int = 8
    baseline: torch.Tensor | None = None
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)


@dataclass
class Attribution:
    """One method's attributions for a batch.

    Attributes:
        values: ``(B, C, H, W)`` float32 on the CPU: the input's shape (attention rollout:
            ``(B, 1, h, w)`` on the patch grid).
        scores: Each image's target logit, ``F(x)``.
        axioms: Per image, what the method's axiom came to (None: the method has none).
        notes: What the run should know (a fused attention turned off, the canonizer used).
        record: Facts for the record (the rule, the canonizers, the attention's source).
    """

    values: torch.Tensor
    scores: list[float]
    axioms: list[dict[str, Any] | None]
    notes: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


def to_maps(values: torch.Tensor, signed: bool) -> torch.Tensor:
    """``(B, C, H, W)`` attributions as ``(B, H, W)`` float32 maps: the sum over channels
    (signed methods: it keeps the total), else the largest magnitude over channels."""
    import torch

    values = torch.nan_to_num(values.float(), nan=0.0)
    return values.sum(dim=1) if signed else values.abs().amax(dim=1)


def unit_maps(values: torch.Tensor, signed: bool) -> torch.Tensor:
    """The maps cam-eval scores: :func:`to_maps`, then ReLU and each divided by its maximum,
    as a CAM is scaled (0 is no evidence for the class; an all-zero map stays zero)."""

    return scale_cams(to_maps(values, signed))


def baseline_image(path: Path | str, preprocess: Preprocessing) -> torch.Tensor:
    """An image file as Integrated Gradients' baseline: decoded and preprocessed as the
    inputs are, ``(C, H, W)``.

    Raises:
        UsageError: If it cannot be read as an image.
    """

    decoded = decode_batches([Path(path)], preprocess, batch_size=1)
    with contextlib.closing(decoded):
        for batch in decoded:
            for item in batch:
                if item.tensor is not None:
                    tensor: torch.Tensor = item.tensor
                    return tensor
                raise UsageError(f"--baseline {path} cannot be read as an image: {item.error}")
    raise UsageError(f"--baseline {path} cannot be read as an image")
