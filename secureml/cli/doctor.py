"""`secureml doctor`: is this GPU node, this cluster, or this node's log healthy for secureml.

Each subcommand lives with its checks in `secureml.doctor` and is added to `app` here; this module
imports only typer so that `secureml --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from secureml.cli.options import FormatOption
from secureml.cli.output import run_cli

app = typer.Typer(
    help="Check a GPU node, a cluster or a node's logs: each check pass / warn / fail, what was "
    "seen, and the fix. Exit 0 when nothing failed, 1 when a check failed, 2 on unusable input.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("logs")
@run_cli
def logs(
    source: Annotated[
        str,
        typer.Argument(
            metavar="FILE|-",
            help="A kernel log (dmesg, journalctl -k, /var/log/kern.log) or a step's log; - reads "
            "standard input.",
        ),
    ],
    audit_dir: Annotated[
        Path | None,
        typer.Option(
            "--audit-dir",
            metavar="DIR",
            help="Audit records to name the tenant and step an Xid's pid belonged to (the log's "
            "own secureml-audit lines are read too).",
        ),
    ] = None,
    output: FormatOption = "text",
) -> None:
    """Classify the GPU driver events in a log: Xids (application, memory, device, NVLink),
    GPUs fallen off the bus, driver/library version mismatches and CUDA errors, each with its
    action (docs/xid.md).

    Exit 0: no event needs action on the node (nothing found, or only the steps' own faults).
    1: an event needs action on the node (memory, device, NVLink, driver mismatch).
    2: the log or the audit folder cannot be read."""
    from secureml.doctor.logs import run_logs

    raise typer.Exit(run_logs(source, audit_dir, output))
