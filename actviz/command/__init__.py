"""The kit every image command plugs into (``run``, ``top-images``, ``diff``, ``optimize``):
the one opening (:func:`open_command`), the head of every JSON document (:func:`json_head`),
the progress protocol (:class:`Reporter`), the batched forward (:class:`BatchForward`) and the
option groups every command shares (:mod:`actviz.command.options`). Imports no torch.
"""

from __future__ import annotations

from actviz.command.forward import BatchForward
from actviz.command.head import json_head, model_fields
from actviz.command.opening import Command, CommandSpec, Loaded, input_paths, open_command
from actviz.command.options import ExecutionOptions, KeywordError, LoadOptions, from_flat
from actviz.command.progress import Reporter, SilentReporter, start_progress

__all__ = [
    "BatchForward",
    "Command",
    "CommandSpec",
    "ExecutionOptions",
    "KeywordError",
    "LoadOptions",
    "Loaded",
    "Reporter",
    "SilentReporter",
    "from_flat",
    "input_paths",
    "json_head",
    "model_fields",
    "open_command",
    "start_progress",
]
