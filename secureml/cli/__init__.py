"""The `secureml` command line: a thin layer over the library.

Each area registers its commands from its own module (imported at the bottom). Command modules
import heavy libraries (kfp, sigstore, grpc, cel) inside the command functions so that
`secureml --help` stays fast.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from secureml.errors import SecuremlError

app = typer.Typer(
    name="secureml",
    help="Make Kubeflow Pipelines safe to run on GPUs shared between tenants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profile_app = typer.Typer(
    help="Validate tenant profiles and render the cluster objects that enforce them.",
    no_args_is_help=True,
)
app.add_typer(profile_app, name="profile")

P = ParamSpec("P")
R = TypeVar("R")


def run_cli(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a `SecuremlError` raised by a command into its diagnostics on stderr and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SecuremlError as err:
            print(f"error: {err.diagnostics()}", file=sys.stderr)
            raise typer.Exit(err.exit_code) from None

    return wrapper


# Command modules register themselves on `app` / `profile_app` when imported; the order here is
# the order of `secureml --help`.
# isort: off
from secureml.cli import compile as _compile  # noqa: E402,F401
from secureml.cli import run as _run  # noqa: E402,F401
from secureml.cli import check_pod as _check_pod  # noqa: E402

app.command("check-pod")(_check_pod.check_pod)
from secureml.cli import verify as _verify  # noqa: E402,F401
from secureml.cli import profile as _profile  # noqa: E402,F401
from secureml.cli import bundle as _bundle  # noqa: E402,F401
from secureml.cli import apply as _apply  # noqa: E402,F401
from secureml.cli import image as _image  # noqa: E402,F401
# isort: on
