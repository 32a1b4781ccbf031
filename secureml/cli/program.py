"""`secureml` as a program (the console script and `python -m secureml`): run the app and exit as
Python does."""

from __future__ import annotations


def main() -> None:
    from secureml.cli.app import app

    app()
