"""The `secureml` application: every command, assembled here in the order a user meets them.

Command modules import typer and the standard library only at the top, so `--help` stays fast.
"""

from __future__ import annotations

import copy
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from secureml.cli import check_pod, compile, doctor, image, profile, run, verify, verify_pipeline

# `secureml --help` lists the commands in this order (typer would put groups last).
ORDER = (
    "compile",
    "run",
    "image",
    "profile",
    "check-pod",
    "verify-image",
    "verify-bundle",
    "verify-pipeline",
    "doctor",
)

EPILOG = "Exit codes, the same in every command: 0 ok; 1 violations, denied or failed; 2 unusable input or environment. docs/cli.md has each command's JSON output."


class _InOrder(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:  # typer.core passes its click Context
        names = super().list_commands(ctx)
        return sorted(names, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))


class _Commands(typer.Typer):
    """The app, which builds only the command (or group) its first argument names."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs["args"] if "args" in kwargs else (args[0] if args else None)
        first = sys.argv[1:2] if argv is None else list(argv)[:1]
        named = _named(self, first[0]) if first else None
        return typer.Typer.__call__(named or self, *args, **kwargs)


def _named(whole: typer.Typer, name: str) -> typer.Typer | None:
    """`whole` with the one command or group called `name` (its callback and settings shared)."""
    commands = [info for info in whole.registered_commands if info.name == name]
    groups = [info for info in whole.registered_groups if info.name == name]
    if len(commands) + len(groups) != 1:
        return None
    narrowed = copy.copy(whole)
    narrowed.registered_commands, narrowed.registered_groups = commands, groups
    return narrowed


app = _Commands(
    cls=_InOrder,
    name="secureml",
    help="Make Kubeflow Pipelines safe to run on GPUs shared between tenants.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"secureml {version('secureml')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("secureml (not installed)")
        raise typer.Exit()


@app.callback()
def main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Make Kubeflow Pipelines safe to run on GPUs shared between tenants."""


# The one-line summaries of `secureml --help`, short enough for 80 columns.
app.command("compile", short_help="Check a pipeline against a profile; write the KFP YAML.")(
    compile.compile_command
)
app.command("run", short_help="Run a pipeline here, every step under the launcher.")(run.run)
app.add_typer(image.app, name="image", short_help="Build step images; check an image.")
app.add_typer(profile.app, name="profile", short_help="Tenant profiles and their cluster bundle.")
app.command("check-pod", short_help="Judge pods as the cluster's admission would.")(
    check_pod.check_pod
)
app.command("verify-image", short_help="Who signed an image, and is the signer trusted.")(
    verify.verify_image
)
app.command("verify-bundle", short_help="Verify a Sigstore bundle (sigstore-conformance).")(
    verify.verify_bundle
)
app.command(
    "verify-pipeline", short_help="Was a pipeline YAML compiled by secureml, for this profile."
)(verify_pipeline.verify_pipeline)
app.add_typer(doctor.app, name="doctor", short_help="Check a GPU node, a cluster or node logs.")
