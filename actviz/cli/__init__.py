"""The ``actviz`` command: Typer commands, option declarations, the rich console, and the one
error boundary."""

from __future__ import annotations

from actviz.cli.commands import app as app
from actviz.cli.commands import main as main

__all__ = ["app", "main"]
