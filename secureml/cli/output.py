"""How every command ends: errors on stderr, one exit-code rule (docs/cli.md), JSON on stdout."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer

from secureml.core.errors import SecuremlError

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
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    piped_width: int | None = None,
) -> None:
    """A table on stdout: fitted to a terminal's width; in a pipe at its natural width, or wrapped
    at `piped_width` (for tables of long free text, which read no better on one line)."""
    from secureml.core.text_table import render_table

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else piped_width
    typer.echo(render_table(headers, rows, title=title, width=width))
