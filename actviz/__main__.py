"""``python -m actviz``."""

from actviz.cli.commands import main

main()
