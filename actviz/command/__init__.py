"""The kit every image command plugs into (``run``, ``top-images``, ``diff``, ``optimize``).

- :func:`open_command`: the one opening, a context manager yielding a :class:`Command` that
  loads (weights, the random-weights warning as data, device, memory format), selects and
  collects warnings (:mod:`actviz.command.opening`; the pieces in
  :mod:`actviz.command.session`);
- :func:`json_head` and :func:`model_fields`: the head of every command's JSON document;
- :class:`Reporter`: the one progress protocol (:class:`SilentReporter` by default);
- :class:`BatchForward`: decode, batch and run one model, or two on the same input;
- the option groups every command shares (:class:`LoadOptions`, :class:`ExecutionOptions`)
  and :func:`from_flat`, which builds a command's options from flat keywords.

Importing this package imports no torch.
"""

from __future__ import annotations

from actviz.command.forward import BatchForward
from actviz.command.head import json_head, model_fields
from actviz.command.opening import Command, Loaded, open_command
from actviz.command.options import ExecutionOptions, LoadOptions, from_flat
from actviz.command.progress import Reporter, SilentReporter, start_progress

__all__ = [
    "BatchForward",
    "Command",
    "ExecutionOptions",
    "LoadOptions",
    "Loaded",
    "Reporter",
    "SilentReporter",
    "from_flat",
    "json_head",
    "model_fields",
    "open_command",
    "start_progress",
]
