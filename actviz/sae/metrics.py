"""Quality said plainly: the fraction of variance explained, L0, dead and dense features,
accumulated over the held-out vectors as they stream; and stability across seeds, from
Hungarian matching of the dictionaries' decoder directions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.dictionary import SparseDictionary
from actviz.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["DENSE", "Quality", "stability"]

#: A feature active on more than this share of the vectors is called dense.
DENSE = 0.1
#: A feature whose best match in another seed has a cosine above this is called stable.
STABLE = 0.7


@dataclass
class Quality:
    """Running sums over vectors, for one dictionary; :meth:`record` reads them out."""

    vectors: int = 0
    sum_x: Any = None
    sum_sq: float = 0.0
    sum_err: float = 0.0
    sum_l0: float = 0.0
    active: Any = None  # (F,) vectors each feature was active on
    strength: Any = None  # (F,) sum of its activations
    peak: Any = None  # (F,) its largest activation
    images: int = 0
    changed: int = 0

    def add(self, sae: SparseDictionary, x: torch.Tensor) -> None:
        """Count ``(N, C)`` raw vectors and their reconstruction (sums on the device)."""
        import torch

        with torch.no_grad():
            z = sae.encode(x)
            err = (sae.decode(z) - x).pow(2).sum()
            on = z > 0
            if self.sum_x is None:
                self.sum_x = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
                self.active = torch.zeros(z.shape[1], dtype=torch.float64, device=x.device)
                self.strength = torch.zeros_like(self.active)
                self.peak = torch.zeros_like(self.active)
            self.sum_x += x.double().sum(dim=0)
            self.sum_sq += float(x.double().pow(2).sum().item())
            self.sum_err += float(err.item())
            self.sum_l0 += float(on.sum().item())
            self.active += on.sum(dim=0).double()
            self.strength += z.double().sum(dim=0)
            self.peak = torch.maximum(self.peak, z.double().max(dim=0).values)
            self.vectors += int(x.shape[0])

    def predictions(self, before: torch.Tensor, after: torch.Tensor) -> None:
        """Count images whose top-1 class changed with the layer spliced (``(B, classes)``
        logits of the same batch without and with)."""
        self.images += int(before.shape[0])
        self.changed += int((before.argmax(dim=1) != after.argmax(dim=1)).sum().item())

    def fve(self) -> float | None:
        if not self.vectors or self.sum_x is None:
            return None
        total = self.sum_sq - float(self.sum_x.pow(2).sum().item()) / self.vectors
        return 1.0 - self.sum_err / total if total > 0 else None

    def density(self) -> list[float]:
        """Per feature, the share of vectors it was active on."""
        if self.active is None:
            return []
        return [float(v) for v in (self.active / max(self.vectors, 1)).tolist()]

    def mean_strength(self) -> list[float]:
        """Per feature, its mean activation where it was active."""
        if self.active is None:
            return []
        return [float(v) for v in (self.strength / self.active.clamp_min(1)).tolist()]

    def record(self, *, spliced: bool) -> dict[str, Any]:
        """The figures, JSON-ready; ``top1_changed`` None when no classifier was spliced."""
        density = self.density()
        features = len(density)
        dead = sum(1 for d in density if d == 0)
        dense = sum(1 for d in density if d > DENSE)
        fve = self.fve()
        return {
            "vectors": self.vectors,
            "fve": round(fve, 6) if fve is not None else None,
            "l0": round(self.sum_l0 / self.vectors, 4) if self.vectors else None,
            "dead": dead,
            "dead_share": round(dead / features, 6) if features else None,
            "dense": dense,
            "dense_share": round(dense / features, 6) if features else None,
            "dense_above": DENSE,
            "images_spliced": self.images if spliced else 0,
            "top1_changed": self.changed if spliced and self.images else None,
            "top1_changed_share": (
                round(self.changed / self.images, 6) if spliced and self.images else None
            ),
        }


def stability(dictionaries: list[torch.Tensor]) -> tuple[torch.Tensor, list[float]]:
    """Each feature of the first dictionary's stability: the mean, over the other seeds, of
    the cosine between its decoder direction and the one Hungarian matching
    (``scipy.optimize.linear_sum_assignment`` on the cosines) pairs it with; and per other
    seed the mean matched cosine.

    Raises:
        UsageError: Without scipy (the ``sae`` extra).
    """
    import torch

    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:
        raise UsageError(
            "--seeds 2 or more matches features with scipy: pip install 'actviz[sae]'"
        ) from None
    first = torch.nn.functional.normalize(dictionaries[0].detach().float().cpu(), dim=1)
    scores = torch.zeros(first.shape[0], dtype=torch.float64)
    means = []
    for other in dictionaries[1:]:
        second = torch.nn.functional.normalize(other.detach().float().cpu(), dim=1)
        cosine = (first @ second.T).double().numpy()
        rows, columns = linear_sum_assignment(-cosine)
        matched = torch.zeros(first.shape[0], dtype=torch.float64)
        matched[torch.as_tensor(rows)] = torch.as_tensor(cosine[rows, columns])
        scores += matched.clamp_min(0)
        means.append(float(matched.mean().item()))
    return (scores / max(len(dictionaries) - 1, 1)).float(), means
