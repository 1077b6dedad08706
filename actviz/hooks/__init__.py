"""Hooks on named modules, registered in one context manager that always removes them: the
hook core (:mod:`~actviz.hooks.session`), the activation recorder (:mod:`~actviz.hooks.recorders`)
and the modules and tensors hooks see (:mod:`~actviz.hooks.refs`). Imports no torch."""

from __future__ import annotations

from actviz.hooks.recorders import ActivationRecorder, capture
from actviz.hooks.refs import activations, layer_refs, tensor_items
from actviz.hooks.session import Capture, HookSession, Skipped, call_key, eval_mode

__all__ = [
    "ActivationRecorder",
    "activations",
    "Capture",
    "HookSession",
    "Skipped",
    "call_key",
    "capture",
    "eval_mode",
    "layer_refs",
    "tensor_items",
]
