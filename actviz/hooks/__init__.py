"""Hooks on named modules, registered in one context manager that always removes them.

- :mod:`actviz.hooks.session`: the hook core every recorder builds on (:class:`HookSession`),
  the capture records, and :func:`eval_mode`.
- :mod:`actviz.hooks.recorders`: the activation recorder (outputs, inputs, attention maps)
  and :func:`capture`.
- :mod:`actviz.hooks.refs`: the selector's view of a model's modules, the tensors inside a
  hook's output, and :func:`check_hookable`.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from actviz.hooks.recorders import (
    ATTN_SUFFIX,
    INPUT_SUFFIX,
    ActivationRecorder,
    CaptureMode,
    capture,
)
from actviz.hooks.refs import check_hookable, layer_refs, tensor_items
from actviz.hooks.session import Capture, HookSession, Skipped, call_key, eval_mode

__all__ = [
    "ATTN_SUFFIX",
    "INPUT_SUFFIX",
    "ActivationRecorder",
    "Capture",
    "CaptureMode",
    "HookSession",
    "Skipped",
    "call_key",
    "capture",
    "check_hookable",
    "eval_mode",
    "layer_refs",
    "tensor_items",
]
