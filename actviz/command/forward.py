"""Decode, batch and run the model (or two models on the same input): the batched forward
every image command streams through."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ActvizError, ModelError, first_line
from actviz.io.loader import decode_batches

if TYPE_CHECKING:
    from actviz.command.options import ExecutionOptions
    from actviz.models.registry import LoadedModel

__all__ = ["BatchForward", "model_failure"]


def model_failure(name: str, first: Path, exc: BaseException, x: Any) -> ModelError:
    """A one-line error for a model that raised on its input, with the likely fix."""
    shape = tuple(x.shape) if hasattr(x, "shape") else None
    hint = (
        f"; it got input of shape {shape}: check --input-size and --in-chans"
        if shape is not None
        else ""
    )
    return ModelError(
        f"{name} failed on a batch starting with {first}: "
        f"{type(exc).__name__}: {first_line(exc)}{hint}"
    )


class BatchForward:
    """Decode, batch and run the model: the loop every image command and a run's measuring
    pass share. With ``second``, a second model runs on each batch right after the first, on
    the same input on the first model's device (a diff's model B): the recorders registered
    on each hold that batch's captures. ``execution`` says how: its batch size, decoding
    workers, autocast and memory format (a command's forced ones already over it:
    :meth:`actviz.command.opening.CommandSpec.execution`)."""

    def __init__(
        self,
        loaded: LoadedModel,
        module: Any,
        execution: ExecutionOptions,
        *,
        second: LoadedModel | None = None,
    ) -> None:
        self.loaded = loaded
        self.module = module
        self.batch_size = execution.batch_size
        self.workers = execution.workers
        self.amp = execution.amp
        self.channels_last = execution.channels_last
        self.second = second
        self.second_logits: Any = None
        """The second model's output on the latest batch (None without a second model)."""

    def batches(
        self,
        paths: Sequence[Path],
        stack: contextlib.ExitStack,
        failed: Any = None,
    ) -> Iterator[tuple[list[tuple[int, tuple[int, int] | None, Any]], Any, Any]]:
        """Yield ``([(index, size, input on CPU)], logits, batch on the device)`` per batch;
        the recorder registered on the module holds that batch's captures. Unreadable images
        go to ``failed(index, reason)``."""
        import torch

        loaded = self.loaded
        device = loaded.device
        autocast_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        decoded = decode_batches(
            paths,
            loaded.preprocess,
            batch_size=self.batch_size,
            workers=self.workers,
            pin_memory=device.type == "cuda",
        )
        # closing(): on Ctrl-C the decoder thread or worker processes stop now, not at GC.
        for batch in stack.enter_context(contextlib.closing(decoded)):
            good = []
            for item in batch:
                if item.tensor is None:
                    if failed is not None:
                        failed(item.index, item.error)
                else:
                    good.append((item.index, item.size, item.tensor))
            if not good:
                continue
            x = torch.stack([t for _, _, t in good]).to(device, non_blocking=True)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            first = paths[good[0][0]]
            with (
                torch.inference_mode(),
                torch.autocast(device.type, dtype=autocast_dtype, enabled=self.amp),
            ):
                logits = _call(loaded, self.module, x, first)
                if self.second is not None:
                    self.second_logits = _call(self.second, self.second.module, x, first)
            yield good, logits, x


def _call(loaded: LoadedModel, module: Any, x: Any, first: Path) -> Any:
    """One model on one batch, called as its family feeds it (a detector takes a list of
    images); its own code's failure, of any type, as one line."""
    try:
        return loaded.family.call(module, x)
    except ActvizError:
        raise
    except Exception as exc:
        raise model_failure(loaded.name, first, exc, x) from exc
