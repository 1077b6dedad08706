"""The TopK sparse autoencoder as plain tensors: encode, decode, and one training step's
forward. Written here rather than taken from a library so that training can stream (one step
per buffer draw, a checkpoint at any step) on the model's device; docs/sae.md says why."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["Activation", "SparseDictionary"]

Activation = Literal["topk", "batchtopk"]


@dataclass
class SparseDictionary:
    """A TopK sparse autoencoder on ``channels``-long activation vectors.

    Vectors are first normalised, ``(x - mean) / scale`` (``scale`` makes the mean squared
    norm of a normalised vector equal to ``channels``), then encoded as
    ``relu(topk((x - b_dec) @ W_enc.T + b_enc))`` and decoded as ``z @ W_dec + b_dec``, whose
    rows (the features' directions) have unit norm.

    Attributes:
        w_enc: ``(F, C)`` encoder.
        b_enc: ``(F,)``.
        w_dec: ``(F, C)`` decoder: row ``f`` is feature ``f``'s direction.
        b_dec: ``(C,)``.
        mean: ``(C,)`` the activations' mean, subtracted before encoding.
        scale: The normalisation's divisor.
        k: Features kept per vector.
        activation: ``topk`` (k per vector) or ``batchtopk`` (k per vector on average over a
            training batch; at inference, every pre-activation above ``threshold``).
        threshold: BatchTopK's inference threshold, a running mean of the training batches'
            smallest kept value.
        config: What the file records beside the weights (model, layer, preprocessing,
            metrics...).
        per_feature: Per-feature figures saved with the weights (``density``, ``stability``),
            each ``(F,)``.
        file: The file it was loaded from (:func:`actviz.load_dictionary`); None for one in memory.
    """

    w_enc: torch.Tensor
    b_enc: torch.Tensor
    w_dec: torch.Tensor
    b_dec: torch.Tensor
    mean: torch.Tensor
    scale: float
    k: int
    activation: Activation = "topk"
    threshold: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    per_feature: dict[str, torch.Tensor] = field(default_factory=dict)
    file: Path | None = None

    @property
    def features(self) -> int:
        """Number of features ``F``."""
        return int(self.w_dec.shape[0])

    @property
    def channels(self) -> int:
        """Length ``C`` of the activation vectors."""
        return int(self.w_dec.shape[1])

    @property
    def device(self) -> torch.device:
        return self.w_dec.device

    def __repr__(self) -> str:
        # The dataclass's own repr prints every weight: tens of thousands of characters.
        layer = (self.config.get("layer") or {}).get("key")
        trained = f", layer={layer!r}, model={self.config.get('model')!r}" if layer else ""
        where = f", file={str(self.file)!r}" if self.file is not None else ""
        return (
            f"SparseDictionary(features={self.features}, channels={self.channels}, k={self.k}, "
            f"activation={self.activation!r}{trained}{where})"
        )

    @classmethod
    def initial(
        cls,
        channels: int,
        features: int,
        k: int,
        *,
        seed: int,
        mean: torch.Tensor,
        scale: float,
        activation: Activation = "topk",
    ) -> SparseDictionary:
        """A fresh dictionary: decoder rows of unit norm drawn from ``seed``, the encoder its
        transpose (Gao et al. 2024's initialisation), biases zero.

        Raises:
            UsageError: For ``k`` not below ``features``, or fewer than 2 channels.
        """
        import torch

        if channels < 2:
            raise UsageError(
                f"the layer gives vectors of {channels} channel(s): a dictionary needs at "
                "least 2; choose a layer with more channels (actviz list-layers MODEL)"
            )
        if not 1 <= k < features:
            raise UsageError(
                f"--k {k} must be at least 1 and below the number of features ({features}); "
                "lower --k or raise --features"
            )
        generator = torch.Generator().manual_seed(seed)
        w_dec = torch.randn(features, channels, generator=generator)
        w_dec /= w_dec.norm(dim=1, keepdim=True)
        device = mean.device
        return cls(
            w_enc=w_dec.clone().to(device),
            b_enc=torch.zeros(features, device=device),
            w_dec=w_dec.to(device),
            b_dec=torch.zeros(channels, device=device),
            mean=mean.float().clone(),
            scale=float(scale),
            k=k,
            activation=activation,
        )

    def parameters(self) -> list[torch.Tensor]:
        """The trained tensors (the normalisation is fixed)."""
        return [self.w_enc, self.b_enc, self.w_dec, self.b_dec]

    def to(self, device: Any) -> SparseDictionary:
        """The same dictionary on ``device`` (in place; returns itself)."""
        for name in ("w_enc", "b_enc", "w_dec", "b_dec", "mean"):
            setattr(self, name, getattr(self, name).detach().to(device).float())
        return self

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, C)`` activations as the dictionary sees them."""
        return (x.float() - self.mean) / self.scale

    def pre_codes(self, xn: torch.Tensor) -> torch.Tensor:
        """Pre-activations ``(N, F)`` of normalised vectors."""
        return (xn - self.b_dec) @ self.w_enc.T + self.b_enc

    def codes(self, pre: torch.Tensor, *, training: bool = False) -> torch.Tensor:
        """Sparse codes from pre-activations: the top ``k`` of each row (BatchTopK: the top
        ``k * N`` of the batch while training, the threshold after), never below zero."""
        import torch

        if self.activation == "batchtopk":
            if training:
                flat = pre.flatten()
                kept = torch.topk(flat, min(self.k * pre.shape[0], flat.numel()))
                codes = torch.zeros_like(flat).scatter(0, kept.indices, kept.values.relu())
                return codes.reshape(pre.shape)
            return torch.where(pre > self.threshold, pre, torch.zeros_like(pre)).relu()
        top = torch.topk(pre, self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Codes ``(N, F)`` of raw ``(N, C)`` activations."""
        return self.codes(self.pre_codes(self.normalise(x)))

    def decode_normalised(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.w_dec + self.b_dec

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Raw activations ``(N, C)`` rebuilt from codes."""
        return self.decode_normalised(z) * self.scale + self.mean

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))``, in the activations' own units."""
        return self.decode(self.encode(x))

    def encode_maps(self, maps: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` maps as ``(B, F, H, W)`` feature maps (one vector per position)."""
        b, c, h, w = maps.shape
        tokens = maps.permute(0, 2, 3, 1).reshape(-1, c)
        return self.encode(tokens).reshape(b, h, w, -1).permute(0, 3, 1, 2)

    def reconstruct_maps(self, maps: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` maps rebuilt through the dictionary, in their dtype."""
        b, c, h, w = maps.shape
        tokens = maps.permute(0, 2, 3, 1).reshape(-1, c)
        out = self.reconstruct(tokens).to(maps.dtype)
        return out.reshape(b, h, w, c).permute(0, 3, 1, 2)

    def renormalise(self) -> None:
        """Decoder rows back to unit norm after a step (their scale lives in the codes)."""
        import torch

        with torch.no_grad():
            self.w_dec /= self.w_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)

    @staticmethod
    def default_lr(features: int) -> float:
        """Adam's learning rate scaled with the dictionary's size (Gao et al. 2024: 2e-4 at
        16k features, times sqrt(16k / F)), at most 1e-3."""
        return min(1e-3, 2e-4 * math.sqrt(2**14 / features))
