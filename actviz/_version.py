"""The version, in a leaf module: reading it imports nothing else of actviz."""

__version__ = "0.1.0"
