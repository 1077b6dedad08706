"""The ``actviz`` command: Typer commands, option declarations, the rich console, and the one
error boundary (in ``boundary``). Importing this package registers every command on ``app``."""

from __future__ import annotations

from actviz.cli import commands as commands
from actviz.cli.boundary import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
