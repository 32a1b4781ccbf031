"""`secureml doctor`: is this GPU node, this cluster, or this node's log healthy for secureml.

Each subcommand lives with its checks in `secureml.doctor` and is added to `app` here; this module
imports only typer so that `secureml --help` stays fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Check a GPU node, a cluster or a node's logs: each check pass / warn / fail, what was "
    "seen, and the fix. Exit 0 when nothing failed, 1 when a check failed, 2 on unusable input.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
