"""A detector in a run: the geometry of its own transform, its maps with the padding cropped
off, and each image's detections as records and as ``<image>/detections.png``.

torchvision's detectors resize each image and pad the batch to a multiple of
``size_divisible`` (32) before the backbone, so a backbone or FPN map covers the padding too.
The recorders crop each map of the backbone and the RPN to ``ceil(size / stride)`` cells, the
part that sees the image, in their hooks (:func:`actviz.windows.padding_crop`), so every
picture and statistic sees the same maps; :class:`DetectionProbe` records the same sizes for
what is computed apart from the recorder (Grad-CAM of a detection).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actviz.hooks.session import HookSession

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch
    from torch import nn

__all__ = [
    "HEADS",
    "DetectionProbe",
    "Found",
    "found_in",
    "with_heads",
]

#: The heads whose rows are the detections themselves (of every image of the batch, in order):
#: Faster R-CNN's box head is run again on the final boxes (it ran on the proposals).
HEADS = {
    "roi_heads.box_head": "box features",
    "roi_heads.mask_predictor": "mask logits",
    "roi_heads.keypoint_predictor": "keypoint heatmaps",
}


class DetectionProbe(HookSession):
    """Watches a detector's ``transform``: each image's size after resizing
    (``image_sizes``) and the padded batch's size, as ``(height, width)``; and the heads that
    run once per detection (Mask R-CNN's mask logits, Keypoint R-CNN's heatmaps), whose
    outputs it keeps (``heads``, on the CPU). For an R-CNN, it keeps what the RoI heads were
    given (the features, the image sizes) and the final boxes, for :meth:`pool_boxes`."""

    def __init__(self, model: nn.Module) -> None:
        names = dict(model.named_modules())
        watched = [head for head in HEADS if head in names and head != "roi_heads.box_head"]
        pools = "roi_heads.box_roi_pool" in names and "roi_heads.box_head" in names
        super().__init__(model, ["transform", *watched, *(["roi_heads"] if pools else [])])
        self.image_sizes: list[tuple[int, int]] = []
        self.padded: tuple[int, int] | None = None
        self.heads: dict[str, torch.Tensor] = {}
        self._pooling: tuple[Any, list[torch.Tensor], list[tuple[int, int]]] | None = None

    def _start_record(self) -> None:
        super()._start_record()
        self.heads = {}
        self._pooling = None

    def _register(self, name: str, module: nn.Module) -> None:
        def sizes(_module: nn.Module, _args: object, output: Any) -> None:
            images = output[0]  # (ImageList, targets)
            self.image_sizes = [(int(h), int(w)) for h, w in images.image_sizes]
            height, width = images.tensors.shape[-2:]
            self.padded = (int(height), int(width))

        def head(_module: nn.Module, _args: object, output: Any) -> None:
            self.heads[name] = output.detach().float().cpu()

        def roi_heads(_module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            # roi_heads(features, proposals, image_shapes, targets) -> (detections, losses);
            # the detections' boxes are in the resized image's pixels, as the pooling wants.
            if len(args) >= 3 and isinstance(output, tuple) and isinstance(output[0], list):
                boxes = [d["boxes"] for d in output[0]]
                self._pooling = (args[0], boxes, list(args[2]))

        hook = {"transform": sizes, "roi_heads": roi_heads}.get(name, head)
        self._add_forward_hook(module, hook)

    def pool_boxes(self) -> None:
        """The box head's features of the final detections of the latest forward, as
        torchvision computes them for the proposals (``box_head(box_roi_pool(features,
        boxes, image_sizes))``), kept in ``heads`` (``(detections, D)``, every image's in
        order). Call it with the run's recorder paused: it runs two of the model's modules."""
        import torch

        if self._pooling is None:
            return
        features, boxes, image_sizes = self._pooling
        self._pooling = None
        roi_heads: Any = self.model.get_submodule("roi_heads")
        # Under --amp the features came out of autocast in half precision: pooled and run
        # in the head's own precision here, outside it.
        weight = next(roi_heads.box_head.parameters(), None)
        dtype = weight.dtype if weight is not None else torch.float32
        features = {key: value.to(dtype) for key, value in features.items()}
        boxes = [b.to(dtype) for b in boxes]
        with torch.inference_mode():
            pooled = roi_heads.box_roi_pool(features, boxes, image_sizes)
            vectors = roi_heads.box_head(pooled)
        self.heads["roi_heads.box_head"] = vectors.detach().float().cpu().flatten(1)


@dataclass(frozen=True)
class Found:
    """One image's detections at or above the score threshold, highest score first.

    Attributes:
        boxes: ``(N, 4)`` boxes ``x1, y1, x2, y2`` in the pixels of the model's input.
        labels: Each detection's class index.
        names: Each detection's class name (``class N`` without names).
        scores: Each detection's score.
        masks: ``(N, H, W)`` mask probabilities (Mask R-CNN), or None.
        keypoints: ``(N, K, 3)`` keypoints ``x, y, visibility`` (Keypoint R-CNN), or None.
        returned: How many detections the model returned before the threshold.
        threshold: The score threshold.
        indices: Each detection's row in the model's output for the image.
        heads: Per detection (the first few), the outputs of the heads that run once per
            detection: ``(label, (h, w) map)`` pairs (its box features laid out as a grid,
            its class's mask logits, the maximum over its keypoint heatmaps).
        head_shapes: What each per-detection head gave for this image (the rows of every
            detection the model returned): ``box features`` -> ``[N, 1024]``, ...
    """

    boxes: npt.NDArray[np.float32]
    labels: list[int]
    names: list[str]
    scores: list[float]
    masks: npt.NDArray[np.float32] | None
    keypoints: npt.NDArray[np.float32] | None
    returned: int
    threshold: float
    indices: list[int] = dataclasses.field(default_factory=list)
    heads: list[list[tuple[str, Any]]] = dataclasses.field(default_factory=list)
    head_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """The detections as the image's record holds them."""
        return [
            {
                "label": label,
                "name": name,
                "score": round(score, 6),
                "box": [round(float(v), 2) for v in box],
            }
            for label, name, score, box in zip(
                self.labels, self.names, self.scores, self.boxes.tolist(), strict=True
            )
        ]


def _category(categories: Sequence[str] | None, label: int) -> str:
    """A label's name; ``class N`` without one. COCO's list keeps ``N/A`` for its unused ids
    (an untrained head predicts them too): those say their id."""
    if categories is None or not 0 <= label < len(categories):
        return f"class {label}"
    name = str(categories[label])
    return f"N/A (class {label})" if name == "N/A" else name


def found_in(
    output: Mapping[str, Any], threshold: float, categories: Sequence[str] | None
) -> Found:
    """The detections of one image's output dict with a score of at least ``threshold``."""
    scores = output["scores"].detach().float().cpu()
    keep = (scores >= threshold).nonzero().flatten()
    keep = keep[scores[keep].argsort(descending=True)]
    labels = [int(v) for v in output["labels"].detach().cpu()[keep].tolist()]
    names = [_category(categories, i) for i in labels]
    masks = output.get("masks")
    keypoints = output.get("keypoints")
    return Found(
        boxes=output["boxes"].detach().float().cpu()[keep].numpy(),
        labels=labels,
        names=names,
        scores=[float(v) for v in scores[keep].tolist()],
        masks=None if masks is None else masks.detach().float().cpu()[keep][:, 0].numpy(),
        keypoints=None if keypoints is None else keypoints.detach().float().cpu()[keep].numpy(),
        returned=int(scores.numel()),
        threshold=threshold,
        indices=[int(v) for v in keep.tolist()],
    )


#: Detections per image whose head outputs are drawn.
_HEAD_ROWS = 4


def with_heads(
    found: Sequence[Found], outputs: Sequence[Any], probe: DetectionProbe
) -> list[Found]:
    """Each image's detections with their per-detection head outputs (the first few): the
    heads' rows are every image's detections in order, so image ``i``'s start after the
    detections of the images before it."""
    if not probe.heads:
        return list(found)
    out = []
    start = 0
    for f, output in zip(found, outputs, strict=True):
        count = len(output["boxes"])
        rows = []
        for rank, (index, label) in enumerate(zip(f.indices, f.labels, strict=True)):
            if rank >= _HEAD_ROWS:
                break
            panels = []
            for name, tensor in _in_order(probe.heads):
                row = start + index
                if row >= len(tensor):
                    continue
                if name.endswith("box_head"):
                    panels.append(("box features", _as_grid(tensor[row]).numpy()))
                elif name.endswith("mask_predictor") and label < tensor.shape[1]:
                    panels.append(("mask logits", tensor[row, label].numpy()))
                elif name.endswith("keypoint_predictor"):
                    panels.append(("keypoints, max", tensor[row].amax(0).numpy()))
            rows.append(panels)
        shapes = {
            HEADS[name]: [count, *(int(n) for n in tensor.shape[1:])]
            for name, tensor in _in_order(probe.heads)
        }
        out.append(dataclasses.replace(f, heads=rows, head_shapes=shapes))
        start += count
    return out


def _in_order(heads: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """The heads' outputs in the order of :data:`HEADS` (the box's features first)."""
    return [(name, heads[name]) for name in HEADS if name in heads]


def _as_grid(vector: torch.Tensor) -> torch.Tensor:
    """A feature vector laid out as the squarest grid its length divides into (1024: 32x32),
    row by row, to be drawn as a map."""

    length = int(vector.numel())
    side = max(1, math.isqrt(length))
    while length % side:
        side -= 1
    return vector.reshape(length // side, side)
