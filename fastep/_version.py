"""fastep's version: the one place it is written (pyproject.toml reads it from here)."""
__version__ = "0.3.0.dev0"     # released versions are tagged v0.1.0, v0.2.0
