"""The package version (one place; hatch reads it for the distribution)."""

__version__ = "0.3.0"
