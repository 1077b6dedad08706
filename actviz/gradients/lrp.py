"""Layer-wise relevance propagation for convolutional networks, through zennit's rules (the
``lrp`` extra): a composite of rules (``epsilon_plus_flat`` by default) with the canonizers that
make a model's structure fit them (torchvision's ResNets and VGGs have their own; any other
model gets batch norms merged into the layer before them where they follow one in a
``Sequential``). zennit registers its rules and canonizes the model inside its context, and
undoes both when the context ends, failed or not.

The relevance starts as a unit seed at the target logit (a one-hot output relevance); the
axiom is conservation: the relevance that reaches the input over the seed. Biases and the
epsilon stabilizer absorb some of it, so it is near 1 but not 1 (0.89-0.99 on resnet18 with
random weights).

zennit has no rules for attention (zennit#184): transformers are refused, with the methods that
read them named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actviz.attention import find_attention, find_weights_tap
from actviz.errors import UsageError, import_extra
from actviz.gradients.attribution import Attribution, AttributionJob

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["canonizers_for", "lrp"]


def _has_attention(model: nn.Module) -> bool:

    return find_attention(model) is not None or find_weights_tap(model) is not None


def canonizers_for(model: nn.Module) -> tuple[list[Any], str]:
    """zennit's canonizers for ``model``, and their names for the record."""
    from torchvision.models import VGG, ResNet

    zennit_tv = import_extra("zennit.torchvision", "lrp", "--method lrp needs zennit")
    zennit_canon = import_extra("zennit.canonizers", "lrp", "--method lrp needs zennit")
    if isinstance(model, ResNet):
        return [zennit_tv.ResNetCanonizer()], "ResNetCanonizer"
    if isinstance(model, VGG):
        return [zennit_tv.VGGCanonizer()], "VGGCanonizer"
    return [zennit_canon.SequentialMergeBatchNorm()], "SequentialMergeBatchNorm"


def composite_for(job: AttributionJob, x: torch.Tensor) -> tuple[Any, str]:
    """The composite ``job.settings.composite`` names, with the model's canonizers (and, for
    ``epsilon_gamma_box``, the input's bounds: pixels of 0 and 1 normalized as the model's
    inputs are)."""
    import torch

    composites = import_extra("zennit.composites", "lrp", "--method lrp needs zennit")
    canonizers, canonizer_names = canonizers_for(job.model)
    kind = composites.COMPOSITES[job.settings.composite]
    if job.settings.composite == "epsilon_gamma_box":
        mean = torch.tensor(job.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(job.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        shape = (1, *x.shape[1:])
        low = ((torch.zeros(shape, device=x.device) - mean) / std).to(x.dtype)
        high = ((torch.ones(shape, device=x.device) - mean) / std).to(x.dtype)
        return kind(low=low, high=high, canonizers=canonizers), canonizer_names
    return kind(canonizers=canonizers), canonizer_names


def lrp(job: AttributionJob) -> Attribution:
    """LRP with zennit's composite of ``settings.composite``: the relevance of each input
    value, from a unit seed at the target logit; each image's conservation is its axiom.

    Raises:
        UsageError: For a model with attention (no LRP rules for it in zennit), or without
            zennit installed (naming the extra).
    """
    import torch

    if _has_attention(job.model):
        raise UsageError(
            "--method lrp applies zennit's rules for convolutional networks, and zennit has no "
            "rules for attention (zennit#184); for a transformer use rollout, grad-rollout, ig "
            "or smoothgrad"
        )
    attribution = import_extra("zennit.attribution", "lrp", "--method lrp needs zennit")
    x = (job.x.clone() if job.x.is_inference() else job.x.detach()).float()
    composite, canonizer_names = composite_for(job, x)
    targets = list(job.targets)
    values, scores = [], []
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        attribution.Gradient(job.model, composite) as attributor,
    ):
        size = max(1, job.batch_size)
        for start in range(0, int(x.shape[0]), size):
            rows = x[start : start + size].detach().clone().requires_grad_(True)
            chosen = torch.tensor(targets[start : start + size], device=x.device)

            def seed(output: torch.Tensor, chosen: torch.Tensor = chosen) -> torch.Tensor:
                return torch.nn.functional.one_hot(chosen, int(output.shape[1])).to(output)

            output, relevance = attributor(rows, seed)
            values.append(relevance.detach().float().cpu())
            scores += output.detach().gather(1, chosen[:, None])[:, 0].double().cpu().tolist()
    stacked = torch.cat(values)
    axioms: list[dict[str, object] | None] = []
    for i in range(int(stacked.shape[0])):
        kept = float(stacked[i].double().sum())
        axioms.append({"name": "conservation", "relevance": kept, "seed": 1.0, "kept": kept})
    return Attribution(
        values=stacked,
        scores=[float(s) for s in scores],
        axioms=axioms,
        record={
            "library": "zennit",
            "composite": job.settings.composite,
            "canonizers": canonizer_names,
            "seed": "one-hot: 1 at the target logit",
        },
    )
