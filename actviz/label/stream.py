"""The passes over the folder, batch by batch, each batch one journal record.

The first pass scores every unit on every image (the spatial max or mean of its map, taken in
the hook), keeps each image's pixels reduced to 8 x 8 per colour for the learnability probe,
and, with masks, the map values that can still be among each unit's top quantile. With masks a
second pass marks each unit's pixels at its threshold and counts them against the masks.
:class:`Gathered` is what the records add up to; a resumed run reads the earlier records into
it before going on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.command.forward import BatchForward
from actviz.hooks import eval_mode
from actviz.label.capture import UnitRecorder
from actviz.label.ledger import decode, encode
from actviz.label.masks import MaskSet, TopValues, marked
from actviz.label.probe import PIXEL_GRID
from actviz.results import ImageResult

if TYPE_CHECKING:
    import torch

    from actviz.command.options import ExecutionOptions
    from actviz.command.progress import Reporter
    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["Gathered", "Pass", "first_pass", "second_pass"]

PIXELS = 3 * PIXEL_GRID * PIXEL_GRID


@dataclass
class Pass:
    """What both passes need: the model, the layers and how the images are named."""

    loaded: LoadedModel
    modules: list[str]
    plans: dict[str, LayerPlan]
    transforms: dict[str, Callable[[torch.Tensor], torch.Tensor | None]]
    score: str
    execution: ExecutionOptions
    """How the images go through the model: batches, decoding, autocast, memory format."""
    rels: dict[str, str]
    """Image path -> its name in records (its path relative to the folder)."""
    index: dict[str, int]
    """Image name -> its place in the folder."""


@dataclass
class Gathered:
    """What the records add up to.

    Attributes:
        units: Capture key -> units of the layer.
        scores: Image name -> capture key -> ``(U,)`` float32 scores.
        pixels: Image name -> its reduced pixels.
        failed: Image name -> its failed record.
        tops: With masks, per capture key the running top values.
        masked: With masks, image names counted by the second pass.
        intersect: Per capture key ``(U, K)`` pixels marked by the unit and held by the
            concept; ``marked``: ``(U,)`` pixels marked; ``held``: ``(K,)`` concept pixels.
        thresholds: Per capture key ``(U,)`` the units' thresholds, once the first pass ended.
    """

    units: dict[str, int]
    concepts: int = 0
    scores: dict[str, dict[str, npt.NDArray[np.float32]]] = field(default_factory=dict)
    pixels: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    tops: dict[str, TopValues] | None = None
    masked: set[str] = field(default_factory=set)
    intersect: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    marked: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    held: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    thresholds: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> None:
        """Add one batch record of either pass."""
        for item in record.get("failed") or []:
            self.failed[str(item["image"])] = dict(item)
            # An image the second pass could not read is left out of both.
            self.scores.pop(str(item["image"]), None)
        names = [str(n) for n in record.get("images") or []]
        if record.get("pass") == 2:
            self._add_counts(record, names)
            return
        count = len(names)
        scores = {
            key: decode(text, "float32", (count, self.units[key]))
            for key, text in (record.get("scores") or {}).items()
        }
        pixels = decode(record["pixels"], "float32", (count, -1)) if count else None
        for i, name in enumerate(names):
            self.failed.pop(name, None)
            self.scores[name] = {key: s[i] for key, s in scores.items()}
            if pixels is not None:
                self.pixels[name] = pixels[i]
        if self.tops is not None:
            for key, top in (record.get("top") or {}).items():
                size = int(top["count"])
                self.tops[key].merge(
                    decode(top["units"], "int32", (size,)),
                    decode(top["values"], "float32", (size,)),
                )

    def _add_counts(self, record: Mapping[str, Any], names: list[str]) -> None:
        if not names:
            return
        k = self.concepts
        self.masked.update(names)
        self.held = self.held + decode(record["held"], "int64", (k,))
        for key, counts in (record.get("iou") or {}).items():
            units = self.units[key]
            inter = decode(counts["intersect"], "int64", (units, k))
            self.intersect[key] = self.intersect.get(key, np.zeros((units, k), np.int64)) + inter
            marks = decode(counts["marked"], "int64", (units,))
            self.marked[key] = self.marked.get(key, np.zeros(units, np.int64)) + marks


def _progress(name: str, path: str, error: str | None = None) -> ImageResult:
    result = ImageResult(path=Path(path), out_dir=PurePosixPath(name).parent)
    result.status = "failed" if error is not None else "ok"
    result.error = error
    return result


def _batches(
    run: Pass, todo: Sequence[Path], stack: contextlib.ExitStack, failed: list[dict[str, Any]]
) -> Iterator[tuple[list[int], Any]]:
    """``(indices into todo, input batch)`` after each forward; unreadable images into
    ``failed``."""

    forward = BatchForward(run.loaded, run.loaded.module, run.execution)

    def on_failure(index: int, error: str | None) -> None:
        path = str(todo[index])
        failed.append({"image": run.rels[path], "path": path, "error": error or "unreadable"})

    for good, _logits, x in forward.batches(todo, stack, on_failure):
        yield [index for index, _, _ in good], x


def first_pass(
    run: Pass, todo: Sequence[Path], notify: Reporter, tops: Mapping[str, TopValues] | None
) -> Iterator[dict[str, Any]]:
    """Each batch's record of the first pass: its images' scores per layer and their reduced
    pixels; with ``tops``, each layer's values that can enter its units' top quantile (the
    caller merges a record before the next batch runs, so the floor keeps rising)."""
    import torch.nn.functional as F

    scores: dict[str, Any] = {}
    top: dict[str, tuple[npt.NDArray[np.int32], npt.NDArray[Any]]] = {}

    def consume(key: str, maps: torch.Tensor, means: torch.Tensor | None) -> None:
        if run.score == "max":
            scores[key] = maps.amax(dim=(2, 3))
        else:
            scores[key] = means if means is not None else maps.mean(dim=(2, 3))
        scores[key] = scores[key].cpu().numpy().astype(np.float32)
        if tops is not None:
            top[key] = tops[key].candidates(maps)

    failed: list[dict[str, Any]] = []
    recorder = UnitRecorder(run.loaded.module, run.modules, run.plans, consume, run.transforms)
    with eval_mode(run.loaded.module), recorder, contextlib.ExitStack() as stack:
        for indices, x in _batches(run, todo, stack, failed):
            names = [run.rels[str(todo[i])] for i in indices]
            unread = [key for key in run.plans if key not in scores]
            if unread:
                why = _unread(unread, recorder.unfit)
                failed += [
                    {"image": run.rels[str(todo[i])], "path": str(todo[i]), "error": why}
                    for i in indices
                ]
                indices, names = [], []
            pixels = F.adaptive_avg_pool2d(x.float(), PIXEL_GRID).flatten(1)
            record: dict[str, Any] = {
                "pass": 1,
                "images": names,
                "failed": list(failed),
                "scores": {key: encode(s, "float32") for key, s in scores.items()} if names else {},
                "pixels": encode(pixels.cpu().numpy(), "float32") if names else "",
            }
            if tops is not None and names:
                record["top"] = {
                    key: {
                        "count": int(units.size),
                        "units": encode(units, "int32"),
                        "values": encode(values, "float32"),
                    }
                    for key, (units, values) in top.items()
                }
            yield from _advance(notify, record, todo, indices)
            failed.clear()
            scores.clear()
            top.clear()
    if failed:
        yield from _advance(notify, {"pass": 1, "images": [], "failed": list(failed)}, todo, [])


def _unread(keys: Sequence[str], unfit: Mapping[str, tuple[int, ...]]) -> str:
    key = keys[0]
    if key in unfit:
        return f"layer {key}'s output of shape {unfit[key]} cannot be read as its planned maps"
    return f"layer {key} did not run on this image"


def _advance(
    notify: Reporter, record: dict[str, Any], todo: Sequence[Path], indices: Sequence[int]
) -> Iterator[dict[str, Any]]:
    """Report each image of the record, then give the record."""
    for item in record.get("failed") or []:
        notify.advance(_progress(item["image"], item["path"], item["error"]))
    for name, i in zip(record.get("images") or [], indices, strict=True):
        notify.advance(_progress(name, str(todo[i])))
    yield record


def second_pass(
    run: Pass,
    todo: Sequence[Path],
    notify: Reporter,
    masks: MaskSet,
    thresholds: Mapping[str, npt.NDArray[np.float32]],
    grid: tuple[int, int],
) -> Iterator[dict[str, Any]]:
    """Each batch's record of the second pass: per layer, the pixels each unit marks at its
    threshold, and how many of them each concept's masks hold; the masks' own pixels."""
    import torch

    kept: dict[str, torch.Tensor] = {}

    def consume(key: str, maps: torch.Tensor, means: torch.Tensor | None) -> None:
        # A copy: the output may be changed in place later in the forward (ReLU(inplace)).
        kept[key] = maps.detach().clone()

    failed: list[dict[str, Any]] = []
    k = len(masks.concepts.names)
    recorder = UnitRecorder(run.loaded.module, run.modules, run.plans, consume, run.transforms)
    preprocess = run.loaded.preprocess
    with eval_mode(run.loaded.module), recorder, contextlib.ExitStack() as stack:
        for indices, _x in _batches(run, todo, stack, failed):
            names = [run.rels[str(todo[i])] for i in indices]
            held = masks.batch([run.index[n] for n in names], preprocess, grid)
            counts: dict[str, Any] = {}
            for key, maps in kept.items():
                thr = torch.as_tensor(thresholds[key], device=maps.device)
                inter = np.zeros((maps.shape[1], k), dtype=np.int64)
                marks = np.zeros(maps.shape[1], dtype=np.int64)
                for row in range(maps.shape[0]):
                    unit_marks = marked(maps[row : row + 1], thr, grid)[0].flatten(1).float()
                    concept = torch.as_tensor(held[row], device=maps.device).flatten(1).float()
                    inter += (unit_marks @ concept.T).round().to(torch.int64).cpu().numpy()
                    marks += unit_marks.sum(dim=1).round().to(torch.int64).cpu().numpy()
                counts[key] = {
                    "intersect": encode(inter, "int64"),
                    "marked": encode(marks, "int64"),
                }
            record = {
                "pass": 2,
                "images": names,
                "failed": list(failed),
                "iou": counts,
                "held": encode(held.sum(axis=(0, 2, 3)), "int64"),
            }
            yield from _advance(notify, record, todo, indices)
            failed.clear()
            kept.clear()
    if failed:
        yield from _advance(notify, {"pass": 2, "images": [], "failed": list(failed)}, todo, [])
