"""One batch through every ablation: the layer's output edited once per ablation and the
versions stacked along the batch through the rest of the model (the unedited one first, so
that before and after come from the same call), or, with the linear-readout shortcut, every
ablation's logits from one product.

An ablation is a row of a ``(K, J)`` mask: which coordinates it changes (one each for a sweep,
all of them otherwise); every changed coordinate gets the mode's new value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.ablate.readout import Readout, pooled

if TYPE_CHECKING:
    import torch

    from actviz.ablate.modes import Mode
    from actviz.ablate.split import Split
    from actviz.ablate.targets import Coordinates

__all__ = ["Engine"]


@dataclass
class Engine:
    """The split model, what is removed and how.

    Attributes:
        split: The model cut at the layer.
        coords: The coordinates ablations change.
        mode: How.
        readout: The linear readout when the shortcut applies, else None.
        rows: Images per call of the rest of the model, at most (every version counted).
    """

    split: Split
    coords: Coordinates
    mode: Mode
    readout: Readout | None = None
    rows: int = 64
    _moves: Any = field(default=None, repr=False)

    def logits(
        self,
        a: torch.Tensor,
        others: list[Any],
        masks: torch.Tensor,
        reference: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, classes)`` logits before and ``(K, B, classes)`` after each ablation of a
        batch whose layer output is ``a`` (``others``: what else the rest needs;
        ``reference``: the mode's, for mean and resample), float32 on ``a``'s device."""
        old = self.coords.read(a)
        new = self.mode.values(old, reference)
        if self.readout is not None:
            return self._shortcut(a, old, new, masks)
        return self._stacked(a, others, old, new, masks)

    def _shortcut(
        self, a: torch.Tensor, old: torch.Tensor, new: torch.Tensor, masks: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        assert self.readout is not None
        before = self.readout.logits(pooled(a))
        if self._moves is None or self._moves.device != a.device:
            # (J, classes): the logits one unit of each coordinate moves, at every position.
            directions = self.coords.directions().to(a.device)
            self._moves = directions @ self.readout.weight.to(a.device).float().T
        change = pooled(new - old)  # (B, J): each coordinate's change, averaged
        masks = masks.to(a.device)
        if bool((masks.sum(dim=1) == 1).all()):
            picked = masks.float().argmax(dim=1)  # one coordinate per ablation
            after = before[None] + change.T[picked][:, :, None] * self._moves[picked][:, None, :]
        else:
            after = before[None] + torch.einsum("kj,bj,jc->kbc", masks.float(), change, self._moves)
        return before, after

    def _stacked(
        self,
        a: torch.Tensor,
        others: list[Any],
        old: torch.Tensor,
        new: torch.Tensor,
        masks: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        batch, count = int(a.shape[0]), int(masks.shape[0])
        versions: list[int | None] = [None, *range(count)]
        per = max(1, self.rows // batch) if self.split.stacks else 1
        if len(versions) > per:  # every call the same size: the same kernels for each row
            versions += [None] * (-len(versions) % per)
        results: list[torch.Tensor] = []
        for start in range(0, len(versions), per):
            chunk = versions[start : start + per]
            edited = [a if k is None else self.coords.put(a, new, old, masks[k]) for k in chunk]
            out = self.split.suffix(torch.cat(edited), others, len(chunk))
            results.append(out.float().reshape(len(chunk), batch, -1))
        every = torch.cat(results)
        return every[0], every[1 : count + 1]
