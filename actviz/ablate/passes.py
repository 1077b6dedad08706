"""The passes over the folder, each through the kit's batch forward with the model's prefix as
the module (the part up to the layer, once per batch):

- the reference pass, for ``mean`` and ``resample``: each coordinate's mean over the folder,
  position by position, and the images that can be read (resample's donors are drawn among
  them);
- the main pass: every image before and after every ablation, one record each;
- the curve pass, for a sweep: each image of the measuring part under its class's N most and
  least important units removed together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz.ablate.prepare import State
from actviz.command.forward import BatchForward
from actviz.errors import ActvizError
from actviz.hooks import eval_mode
from actviz.io.loader import decode_batches
from actviz.results import ImageResult

if TYPE_CHECKING:
    import torch

    from actviz.command import Reporter

__all__ = [
    "Curves",
    "References",
    "curve_pass",
    "main_pass",
    "progress_of",
    "reference_pass",
    "reference_values",
]


@dataclass
class References:
    """What the mode needs from the folder.

    Attributes:
        readable: The images that could be read, in folder order.
        mean: ``(J, *positions)`` each coordinate's mean over them (``mean`` mode).
        donors: Image -> its donor image (``resample`` mode), a cycle over ``readable``
            in an order drawn from the seed, so no image is its own donor (with two or more).
        failed: Image -> why it could not be read.
    """

    readable: list[Path] = field(default_factory=list)
    mean: torch.Tensor | None = None
    donors: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Curves:
    """The curve pass's plan: per class its coordinates in order of importance, and the
    sizes of each curve's points."""

    order: dict[int, list[int]]
    sizes: list[int]

    def masks(self, classes: Sequence[int], count: int) -> tuple[torch.Tensor, list[int]]:
        """``(len(classes) * 2 * len(sizes), J)``: for each class, its best-N masks then its
        worst-N masks; and the first row of each class."""
        import torch

        rows: list[torch.Tensor] = []
        first: list[int] = []
        for c in classes:
            first.append(len(rows))
            order = self.order[c]
            for end in ("best", "worst"):
                for n in self.sizes:
                    mask = torch.zeros(count, dtype=torch.bool)
                    mask[order[:n] if end == "best" else order[len(order) - n :]] = True
                    rows.append(mask)
        return torch.stack(rows), first


def progress_of(record: dict[str, Any], *, later: bool = False) -> ImageResult:
    """A record as the reporter counts it (a failed image is said in its first pass only)."""
    path = Path(record.get("path", record.get("image", "")))
    result = ImageResult(path=path, out_dir=PurePosixPath(str(record.get("image", ""))).parent)
    failed = record.get("status", "ok") != "ok"
    result.status = ("skipped" if later else "failed") if failed else "ok"
    result.error = record.get("error")
    return result


def _forward(state: State) -> Any:

    # Ablate's options refuse --amp: the passes run in float32.
    return BatchForward(state.loaded, state.split.prefix, state.opts.execution)


def _batches(
    state: State, paths: Sequence[Path], failed: Callable[[int, str | None], None]
) -> Iterator[tuple[list[int], Any, Any]]:
    """``(indices into paths, layer output, the rest's other inputs)`` per batch."""

    with eval_mode(state.loaded.module), contextlib.ExitStack() as stack:
        for good, (a, others), _x in _forward(state).batches(paths, stack, failed):
            yield [index for index, _, _ in good], a, others


def reference_pass(state: State, paths: list[Path], notify: Reporter) -> References:
    """The mode's references, and which images can be read."""
    import torch

    refs = References()
    total: torch.Tensor | None = None

    def failed(index: int, error: str | None) -> None:
        rel = state.rels[str(paths[index])]
        refs.failed[rel] = error or "cannot be read"
        notify.advance(
            progress_of(
                {"image": rel, "path": str(paths[index]), "status": "failed", "error": error}
            )
        )

    want_mean = state.mode.needs == "mean"
    for indices, a, _others in _batches(state, paths, failed):
        if want_mean:
            values = state.coords.read(a).double().sum(dim=0)
            total = values if total is None else total + values
        for i in indices:
            refs.readable.append(paths[i])
            notify.advance(progress_of({"image": state.rels[str(paths[i])]}))
    order = sorted(refs.readable, key=lambda p: state.rels[str(p)])
    if want_mean and total is not None:
        refs.mean = (total / len(order)).float()
    if state.mode.needs == "donor" and order:
        generator = torch.Generator().manual_seed(state.opts.seed)
        cycle = [order[i] for i in torch.randperm(len(order), generator=generator).tolist()]
        refs.donors = {state.rels[str(p)]: cycle[(i + 1) % len(cycle)] for i, p in enumerate(cycle)}
    return refs


def _donor_values(state: State, rels: list[str], refs: References, device: Any) -> torch.Tensor:
    """The coordinates' values in each image's donor."""
    import torch

    donors = [refs.donors[rel] for rel in rels]
    decoded = next(iter(decode_batches(donors, state.loaded.preprocess, batch_size=len(donors))))
    missing = next((item for item in decoded if item.tensor is None), None)
    if missing is not None or len(decoded) != len(donors):
        where = donors[missing.index] if missing is not None else donors[0]
        raise ActvizError(f"{where} could be read before and not now; run again")
    x = torch.stack([item.tensor for item in decoded if item.tensor is not None]).to(device)
    if state.opts.execution.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    a, _ = state.split.prefix(x)
    return state.coords.read(a)


def reference_values(
    state: State, rels: list[str], refs: References | None, device: Any
) -> torch.Tensor | None:
    """The mode's reference for a batch of images: the folder's mean, or their donors'
    values; None for a mode that needs none."""
    need = state.mode.needs
    if need is None or refs is None:
        return None
    if need == "mean":
        assert refs.mean is not None
        return refs.mean.to(device)
    return _donor_values(state, rels, refs, device)


def _labels(state: State, rels: list[str], pred: torch.Tensor) -> list[int]:
    if state.labels.agreement:
        return [int(p) for p in pred.tolist()]
    return [state.labels.of[rel] for rel in rels]


def main_pass(
    state: State, paths: list[Path], refs: References | None, notify: Reporter
) -> Iterator[dict[str, Any]]:
    """One record per image: its class, its prediction and class logit before, and after
    each ablation; unreadable images as failed records."""
    import torch

    failed: list[dict[str, Any]] = []

    def on_failure(index: int, error: str | None) -> None:
        path = paths[index]
        failed.append(
            {"image": state.rels[str(path)], "path": str(path), "status": "failed", "error": error}
        )

    masks = state.ablations.masks
    for indices, a, others in _batches(state, paths, on_failure):
        for record in failed:
            notify.advance(progress_of(record))
            yield record
        failed.clear()
        rels = [state.rels[str(paths[i])] for i in indices]
        with torch.inference_mode():
            ref = reference_values(state, rels, refs, a.device)
            before, after = state.engine.logits(a, others, masks, ref)
        pred = before.argmax(dim=1)
        labels = _labels(state, rels, pred)
        rows = torch.as_tensor(labels, device=before.device)
        picked = torch.arange(len(labels), device=before.device)
        logit = before[picked, rows].tolist()
        preds_after = after.argmax(dim=2).T.tolist()  # (B, K)
        logits_after = after[:, picked, rows].T.tolist()
        for j, i in enumerate(indices):
            record = {
                "image": rels[j],
                "path": str(paths[i]),
                "status": "ok",
                "label": labels[j],
                "pred": int(pred[j]),
                "logit": logit[j],
                "preds": preds_after[j],
                "logits": logits_after[j],
            }
            notify.advance(progress_of(record))
            yield record
    for record in failed:
        notify.advance(progress_of(record))
        yield record


def curve_pass(
    state: State,
    paths: list[Path],
    classes: dict[str, int],
    curves: Curves,
    refs: References | None,
    notify: Reporter,
) -> Iterator[dict[str, Any]]:
    """One record per measured image (``classes``: image -> its class): its prediction at
    each point of its class's best and worst curve."""
    import torch

    points = len(curves.sizes)
    count = state.coords.count
    for indices, a, others in _batches(state, paths, lambda _i, _e: None):
        rels = [state.rels[str(paths[i])] for i in indices]
        present = sorted({classes[rel] for rel in rels})
        masks, first = curves.masks(present, count)
        with torch.inference_mode():
            ref = reference_values(state, rels, refs, a.device)
            _before, after = state.engine.logits(a, others, masks, ref)
        preds = after.argmax(dim=2).cpu()  # (rows, B)
        for j, rel in enumerate(rels):
            start = first[present.index(classes[rel])]
            column = preds[start : start + 2 * points, j].tolist()
            record = {"curve": rel, "best": column[:points], "worst": column[points:]}
            notify.advance(progress_of({"image": rel, "path": str(paths[indices[j]])}))
            yield record
