"""The `secureml` command line: a thin layer over the library (docs/cli.md)."""

from secureml.cli.app import app

__all__ = ["app"]
