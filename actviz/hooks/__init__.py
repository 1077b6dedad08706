"""Hooks on named modules, registered in one context manager that always removes them.

- :mod:`actviz.hooks.session`: the hook core every recorder builds on (:class:`HookSession`),
  the capture records, and :func:`eval_mode`.
- :mod:`actviz.hooks.recorders`: the activation recorder (outputs, inputs, attention maps)
  and :func:`capture`.
- :mod:`actviz.hooks.refs`: the selector's view of a model's modules, the tensors inside a
  hook's output, and the check that hooks will fire.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from actviz.hooks.recorders import ActivationRecorder, capture
from actviz.hooks.refs import layer_refs, tensor_items
from actviz.hooks.session import Capture, HookSession, Skipped, call_key, eval_mode

__all__ = [
    "ActivationRecorder",
    "Capture",
    "HookSession",
    "Skipped",
    "call_key",
    "capture",
    "eval_mode",
    "layer_refs",
    "tensor_items",
]
