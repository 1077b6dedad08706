"""``actviz.watch``: statistics of a model while it trains, and where the first NaN came from.

One :class:`Watch` is one :class:`~actviz.hooks.HookSession` on every module of the model:

- On every step, every module's inputs and outputs (and their gradients) are checked for NaN
  and Inf (:mod:`actviz.monitor.nonfinite`), the whole model whether ``layers`` selects a
  module or not.
- Every ``every`` steps, each selected layer's output is summarised (mean, std, min, max,
  fraction of zeros, NaN and Inf counts, the norm of the gradient reaching it) and each
  parameter's gradient norm (before and after clipping), weight norm and update-to-weight
  ratio are taken, in hooks on the parameters and on the optimizer's step.

Everything is reduced on the device into 0-d tensors and read with one transfer at the end of
the step (:class:`~actviz.monitor.scalars.ScalarBatch`); what the step held is dropped then.
The model's training flags and autograd are left alone: the hooks read, never change.

A step ends at ``w.step()``; a loop that never calls it has its steps ended by the optimizer's
step (or, with no optimizer, by each training forward), at the next forward or at exit.

This module is the entry point; the context manager is :class:`~actviz.monitor.watcher.Watch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from actviz.errors import UsageError
from actviz.hooks import layer_refs
from actviz.monitor.probe import ProbeSink
from actviz.monitor.tensorboard import TensorBoardSink
from actviz.monitor.watcher import Watch
from actviz.selectors import MODULE_LISTING, select_layers

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["NONFINITE_MODES", "Watch", "watch"]

NONFINITE_MODES = ("record", "raise", "off")


def watch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    layers: str | Sequence[str] | None = None,
    every: int = 10,
    out: str | Path = "actviz-watch",
    on_nonfinite: str = "record",
    allow_inf: str | Sequence[str] | None = None,
    tensorboard: bool = False,
    probe: torch.Tensor | None = None,
    probe_every: int | None = None,
) -> Watch:
    """Watch a model while it trains.

    Example:
        >>> with actviz.watch(model, optimizer, layers="conv,linear", out="runs/exp1") as w:
        ...     for x, y in loader:
        ...         loss = loss_fn(model(x), y)
        ...         loss.backward()
        ...         torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        ...         optimizer.step(); optimizer.zero_grad()
        ...         w.step(loss=loss)

    Args:
        model: The model being trained (an eager ``nn.Module``).
        optimizer: Its optimizer: gives the gradient norms after clipping, and the update
            ratios. Without one they are left out.
        layers: Which layers' outputs to summarise (a selector, as ``--layers``); default:
            every leaf module that holds parameters. The non-finite watch covers every module
            whatever this says.
        every: Record statistics every this many steps (0: none, the non-finite watch only).
        out: The folder of the log (``watch.jsonl``), saved inputs, TensorBoard files and
            probe pictures; appended to when it exists.
        on_nonfinite: ``record`` (log the origin, warn once), ``raise`` (stop with
            :class:`~actviz.errors.NonFiniteError`) or ``off`` (no non-finite watch).
        allow_inf: Modules (a selector) whose inputs and outputs may hold ``-inf`` on
            purpose (attention masks).
        tensorboard: Also write the scalars, histograms and probe pictures for TensorBoard
            (needs ``pip install 'actviz[tensorboard]'``).
        probe: A fixed batch drawn as feature-map grids every ``probe_every`` steps (default:
            ``every``), on the scale of the first drawing.
        probe_every: How often the probe is drawn.

    Returns:
        The context manager; use it in a ``with`` block.

    Raises:
        UsageError: For a model that is not a module, an optimizer that is not one, a probe
            that is not a batch of float images, or a bad ``every``, ``on_nonfinite`` or
            ``probe_every``.
        LayerSelectionError: When ``layers`` selects nothing.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        hint = (
            f"; build it first: model = actviz.load_model({model!r}).module"
            if isinstance(model, str)
            else ""
        )
        raise UsageError(
            f"watch takes the nn.Module being trained, not {type(model).__name__}{hint}"
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        what = type(optimizer).__name__
        fix = (
            "build one from them first: torch.optim.SGD(model.parameters(), lr=...)"
            if what == "generator" or isinstance(optimizer, torch.nn.Module | str)
            else "pass the torch.optim.Optimizer that steps the model, or None"
        )
        raise UsageError(f"watch's optimizer is a torch.optim.Optimizer, not {what}; {fix}")
    if probe is not None and isinstance(probe, torch.Tensor) and not probe.is_floating_point():
        raise UsageError(
            f"probe must be a batch of float images as the model takes them, not {probe.dtype}; "
            "preprocess it first (probe.float() / 255, then the model's normalisation)"
        )
    if probe is not None and (not isinstance(probe, torch.Tensor) or probe.dim() != 4):
        got = tuple(probe.shape) if isinstance(probe, torch.Tensor) else type(probe).__name__
        fix = (
            "; add the batch dimension: probe.unsqueeze(0)"
            if isinstance(probe, torch.Tensor) and probe.dim() == 3
            else ""
        )
        raise UsageError(f"probe must be a batch of images (N, C, H, W), not {got}{fix}")
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise UsageError(f"every must be a whole number of steps >= 0, not {every!r}")
    if on_nonfinite not in NONFINITE_MODES:
        raise UsageError(
            f"on_nonfinite must be one of {', '.join(NONFINITE_MODES)}, not {on_nonfinite!r}"
        )
    refs = layer_refs(model)
    if layers is None:
        owners = {
            n for n, m in model.named_modules() if next(m.parameters(False), None) is not None
        }
        selected = [r.name for r in refs if r.leaf and r.name in owners]
    else:
        selected = select_layers(refs, layers, model=type(model).__name__, listing=MODULE_LISTING)
    allowed = (
        select_layers(refs, allow_inf, model=type(model).__name__, listing=MODULE_LISTING)
        if allow_inf
        else []
    )
    probe_every = probe_every if probe_every is not None else (every or 10)
    if not isinstance(probe_every, int) or isinstance(probe_every, bool) or probe_every < 1:
        raise UsageError(f"probe_every must be a whole number of steps >= 1, not {probe_every!r}")
    folder = Path(out)
    board = None
    if tensorboard:
        board = TensorBoardSink(folder)
    prober = None
    if probe is not None:
        prober = ProbeSink(model, probe, selected, folder, probe_every)
    return Watch(
        model,
        optimizer,
        selected,
        every=every,
        out=folder,
        on_nonfinite=on_nonfinite,
        allow_inf=allowed,
        tensorboard=board,
        probe=prober,
    )
