"""Streaming training: a bounded shuffle buffer of activation vectors on the model's device,
and one Adam step per draw for each dictionary (one per seed, all fed the same draws).

The buffer holds at most ``capacity`` vectors: when full, it is shuffled, half of it is handed
out as training batches and the other half stays to be mixed with the next images' vectors,
so vectors of one image are spread over many steps and nothing is ever written to disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.dictionary import SparseDictionary

if TYPE_CHECKING:
    import torch

__all__ = ["ShuffleBuffer", "Trainer", "normalisation"]

#: Steps between two readings of the running fraction of variance explained.
FIGURES_EVERY = 8


class ShuffleBuffer:
    """At most ``capacity`` vectors of ``channels`` on ``device``, handed out shuffled."""

    def __init__(self, capacity: int, channels: int, device: Any, *, seed: int) -> None:
        import torch

        self.capacity = capacity
        self.store = torch.empty(capacity, channels, device=device)
        self.filled = 0
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def add(self, vectors: torch.Tensor) -> Iterator[torch.Tensor]:
        """Take ``vectors`` in; yield shuffled vectors (half a buffer at a time) as it fills."""
        start = 0
        while start < vectors.shape[0]:
            room = self.capacity - self.filled
            part = vectors[start : start + room]
            self.store[self.filled : self.filled + part.shape[0]] = part
            self.filled += part.shape[0]
            start += part.shape[0]
            if self.filled == self.capacity:
                yield self._release(self.capacity // 2)

    def drain(self) -> Iterator[torch.Tensor]:
        """Everything still held, shuffled (the end of an epoch)."""
        if self.filled:
            yield self._release(self.filled)

    def _release(self, count: int) -> torch.Tensor:
        import torch

        order = torch.randperm(self.filled, generator=self.generator).to(self.store.device)
        mixed = self.store[: self.filled][order]
        out, rest = mixed[:count], mixed[count:]
        self.store[: rest.shape[0]] = rest
        self.filled = rest.shape[0]
        return out


def normalisation(vectors: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The mean and the scale that make the mean squared norm of centred vectors equal to
    their channel count (one scale for the layer, so every feature keeps its direction)."""
    mean = vectors.mean(dim=0)
    spread = (vectors - mean).pow(2).sum(dim=1).mean().item()
    scale = (spread / vectors.shape[1]) ** 0.5
    return mean, scale if scale > 0 else 1.0


@dataclass
class Step:
    """One training step's figures, for the progress line (the first dictionary's)."""

    fve: float
    l0: float


class Trainer:
    """Adam on each dictionary, the same batches for all; a running (exponential) fraction of
    variance explained of the first, for the progress bar."""

    def __init__(self, saes: list[SparseDictionary], lr: float) -> None:
        import torch

        self.saes = saes
        for sae in saes:
            for tensor in sae.parameters():
                tensor.requires_grad_(True)
        self.optimizers = [torch.optim.Adam(sae.parameters(), lr=lr) for sae in saes]
        self.steps = 0
        self.tokens = 0
        self.running_fve: float | None = None
        # The pass's figure, summed on the device every step (read once, at the pass's end).
        self._pass_error: Any = None
        self._pass_spread: Any = None

    def step(self, batch: torch.Tensor) -> Step:
        """One Adam step of every dictionary on ``batch`` (raw ``(N, C)`` vectors)."""
        import torch

        figures = Step(0.0, 0.0)
        with torch.enable_grad():
            for index, (sae, optimizer) in enumerate(zip(self.saes, self.optimizers, strict=True)):
                xn = sae.normalise(batch)
                pre = sae.pre_codes(xn)
                z = sae.codes(pre, training=True)
                error = (sae.decode_normalised(z) - xn).pow(2).sum(dim=1)
                loss = error.mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
                optimizer.step()
                sae.renormalise()
                if sae.activation == "batchtopk":
                    _update_threshold(sae, z)
                if index == 0:
                    with torch.no_grad():
                        err = error.detach().sum()
                        spread_sum = (xn - xn.mean(dim=0)).pow(2).sum()
                    if self._pass_error is None:
                        self._pass_error, self._pass_spread = err, spread_sum
                    else:
                        self._pass_error += err
                        self._pass_spread += spread_sum
                # The running figure every few steps: each reading waits for the device.
                if index == 0 and self.steps % FIGURES_EVERY == 0:
                    with torch.no_grad():
                        spread = (xn - xn.mean(dim=0)).pow(2).sum(dim=1).mean()
                        fve = 1.0 - (error.mean() / spread.clamp_min(1e-12)).item()
                        figures = Step(fve, float((z > 0).sum(dim=1).float().mean().item()))
        if self.steps % FIGURES_EVERY == 0:
            rate = 0.3 if self.running_fve is not None else 1.0
            self.running_fve = (1 - rate) * (self.running_fve or 0.0) + rate * figures.fve
        self.steps += 1
        self.tokens += int(batch.shape[0])
        return figures

    def pass_fve(self) -> float | None:
        """The first dictionary's fraction of variance explained over the training batches
        since the last call (each batch around its own mean); None without a step."""
        if self._pass_error is None:
            return None
        spread = float(self._pass_spread.item())
        fve = 1.0 - float(self._pass_error.item()) / spread if spread > 0 else None
        self._pass_error = self._pass_spread = None
        return fve

    def state(self) -> dict[str, torch.Tensor]:
        """Adam's moments and step counts of every dictionary, flat, for the state file."""
        import torch

        tensors: dict[str, torch.Tensor] = {}
        for i, optimizer in enumerate(self.optimizers):
            for p, param in enumerate(optimizer.param_groups[0]["params"]):
                held = optimizer.state.get(param, {})
                for name in ("exp_avg", "exp_avg_sq"):
                    if name in held:
                        tensors[f"adam.{i}.{p}.{name}"] = held[name].detach().cpu()
                if "step" in held:
                    tensors[f"adam.{i}.{p}.step"] = torch.as_tensor(held["step"]).reshape(1).cpu()
        return tensors

    def restore(self, tensors: dict[str, torch.Tensor]) -> None:
        """Adam's state back from :meth:`state`'s tensors."""
        for i, optimizer in enumerate(self.optimizers):
            for p, param in enumerate(optimizer.param_groups[0]["params"]):
                prefix = f"adam.{i}.{p}."
                if prefix + "exp_avg" not in tensors:
                    continue
                optimizer.state[param] = {
                    "step": tensors[prefix + "step"].reshape(()).float(),
                    "exp_avg": tensors[prefix + "exp_avg"].to(param.device),
                    "exp_avg_sq": tensors[prefix + "exp_avg_sq"].to(param.device),
                }


def _update_threshold(sae: SparseDictionary, z: torch.Tensor) -> None:
    """BatchTopK's inference threshold: a running mean of each batch's smallest kept value."""
    kept = z[z > 0]
    if kept.numel():
        smallest = float(kept.min().item())
        sae.threshold = smallest if sae.threshold == 0 else 0.99 * sae.threshold + 0.01 * smallest
