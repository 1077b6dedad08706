"""``python -m actviz``."""

from actviz.cli import main

main()
