"""The `secureml` command line: a thin layer over the library (docs/cli.md).

`secureml.cli.app` assembles the commands; each command module parses options, calls the library
and prints. `app` is re-exported here for the console script and for tests.
"""

from secureml.cli.app import app

__all__ = ["app"]
