"""The two things TCAV reads from the model, one batch at a time: each image's activation at
the layer in channel space (its maps' spatial mean: the vector a CAV is trained on), and each
image's gradient of a class score with respect to the layer in channel space (summed over the
positions: the derivative along a vector added at every position, as ``ablate --direction``
steers). Both through the layer's plan, so ViT tokens and channels-last blocks are read as
top-images reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz.command.forward import model_failure
from actviz.errors import ActvizError
from actviz.gradients import compute_gradients
from actviz.hooks import eval_mode
from actviz.io.loader import decode_batches
from actviz.label.capture import UnitRecorder
from actviz.top_images.plan import as_maps

if TYPE_CHECKING:
    import torch

    from actviz.models import LoadedModel
    from actviz.top_images.plan import LayerPlan

__all__ = ["Layer", "activations", "gradients"]

Failed = Callable[[int, str], None]


@dataclass(frozen=True)
class Layer:
    """The layer the vectors live in.

    Attributes:
        loaded: The model.
        module: The module's qualified name.
        plan: How its output is read as maps (its key: the capture key).
        batch_size: Images per forward.
        workers: Decoding workers.
    """

    loaded: LoadedModel
    module: str
    plan: LayerPlan
    batch_size: int
    workers: int


def _decoded(
    layer: Layer, paths: Sequence[Path], stack: contextlib.ExitStack, failed: Failed
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """``(indices, batch on the device)``; unreadable images to ``failed``."""
    import torch

    loaded = layer.loaded
    decoded = decode_batches(
        paths, loaded.preprocess, batch_size=layer.batch_size, workers=layer.workers
    )
    for batch in stack.enter_context(contextlib.closing(decoded)):
        good: list[tuple[int, torch.Tensor]] = []
        for item in batch:
            if item.tensor is None:
                failed(item.index, item.error or "unreadable")
            else:
                good.append((item.index, item.tensor))
        if good:
            x = torch.stack([tensor for _, tensor in good]).to(loaded.device)
            yield [index for index, _ in good], x


def activations(
    layer: Layer, paths: Sequence[Path], failed: Failed
) -> Iterator[tuple[list[int], npt.NDArray[np.float32]]]:
    """Per batch, its images' indices and their activations ``(n, C)``: each map's mean."""
    import torch

    found: dict[str, Any] = {}

    def consume(key: str, maps: torch.Tensor, means: torch.Tensor | None) -> None:
        found[key] = (means if means is not None else maps.mean(dim=(2, 3))).cpu().numpy()

    loaded, key = layer.loaded, layer.plan.key
    recorder = UnitRecorder(loaded.module, [layer.module], {key: layer.plan}, consume)
    with eval_mode(loaded.module), recorder, contextlib.ExitStack() as stack:
        for indices, x in _decoded(layer, paths, stack, failed):
            found.clear()
            with torch.inference_mode():
                try:
                    loaded.family.call(loaded.module, x)
                except ActvizError:
                    raise
                except Exception as exc:
                    raise model_failure(loaded.name, paths[indices[0]], exc, x) from exc
            if key not in found:
                for i in indices:
                    failed(i, f"layer {key}'s output could not be read as its planned maps")
                continue
            yield indices, np.asarray(found[key], dtype=np.float32)


def gradients(
    layer: Layer, paths: Sequence[Path], target: int, failed: Failed
) -> Iterator[tuple[list[int], npt.NDArray[np.float32]]]:
    """Per batch, its images' indices and the gradient of class ``target``'s score with
    respect to the layer, summed over the positions ``(n, C)``."""

    loaded, key = layer.loaded, layer.plan.key
    with contextlib.ExitStack() as stack:
        for indices, x in _decoded(layer, paths, stack, failed):
            result = compute_gradients(
                loaded.module, x, [layer.module], target=[target] * len(indices)
            )
            capture = result.captures.get(key)
            gradient = getattr(capture, "gradient", None)
            if gradient is None or tuple(gradient.shape[1:]) != layer.plan.shape:
                for i in indices:
                    failed(i, f"layer {key} has no gradient of the shape planned for this image")
                continue
            maps = as_maps(gradient, layer.plan)
            yield indices, maps.sum(dim=(2, 3)).numpy().astype(np.float32)
