"""How every command ends: errors on stderr with one exit-code rule, JSON on stdout, rich tables.

Exit codes, the same in every command (docs/cli.md):

- 0  ok: valid, compliant, allowed, verified, applied, no change;
- 1  the input is usable and the answer is no: rule violations, denied pods, a signature that does
     not verify, a bundle that changes (`profile diff`), a failed run;
- 2  unusable input or environment: a bad file or flag, an invalid profile, a registry or cluster
     that cannot be reached. A `SecuremlError` carries its code (`InputError`, `ProfileError`,
     `ClusterError` and `EnvironmentProblem` are 2); an `OSError` no check caught is 2 as well.

rich is imported only when a table is drawn, so `--help` and JSON output do not pay for it.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer

from secureml.errors import SecuremlError

OK, NO, UNUSABLE = 0, 1, 2

P = ParamSpec("P")
R = TypeVar("R")


def run_cli(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a `SecuremlError` (or an uncaught `OSError`) into diagnostics on stderr and its code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SecuremlError as err:
            print(f"error: {err.diagnostics()}", file=sys.stderr)
            raise typer.Exit(err.exit_code) from None
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            print(f"error: {where}{err.strerror or err}", file=sys.stderr)
            raise typer.Exit(UNUSABLE) from None

    return wrapper


def emit_json(document: dict[str, Any]) -> None:
    """One JSON document on stdout: sorted keys, two-space indent (stable across runs)."""
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, title: str | None = None
) -> None:
    """A table on stdout, laid out by rich for the terminal's width (80 columns in a pipe)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=box.SIMPLE_HEAD,
        title=Text(title) if title else None,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for header in headers:
        table.add_column(header, overflow="fold")  # wrap long cells; never cut a name or path
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(file=sys.stdout, highlight=False).print(table)
