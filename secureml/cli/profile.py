"""`secureml profile validate` and `secureml profile schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from secureml.cli import profile_app, run_cli
from secureml.errors import ProfileError, SecuremlError


@profile_app.command("validate")
@run_cli
def validate(
    files: Annotated[list[Path], typer.Argument(help="TenantProfile YAML files to check.")],
) -> None:
    """Check tenant profiles: one line per problem (file:line:column: field: message).

    Exit 0: every profile is valid; 2: a profile is unusable (invalid, unreadable, not YAML).
    """
    from secureml.profile import load_profile

    failed = False
    for path in files:
        try:
            profile = load_profile(path)
        except ProfileError as err:
            failed = True
            for field, message in err.problems:
                typer.echo(f"{err.where_of(field)}: {field}: {message}")
        except SecuremlError as err:
            failed = True
            typer.echo(err.diagnostics().replace("\n", " "))
        else:
            typer.echo(f"{path}: ok (tenant {profile.metadata.name}, tier {profile.spec.tier})")
    if failed:
        raise typer.Exit(2)


@profile_app.command("schema")
def schema() -> None:
    """Print the TenantProfile JSON Schema (for editors and CI)."""
    from secureml.profile import profile_json_schema

    typer.echo(json.dumps(profile_json_schema(), indent=2, sort_keys=True))
