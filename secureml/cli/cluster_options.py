"""Options shared by the commands that talk to a cluster (`profile apply`, `check-pod --server`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's "
        "in-cluster service account).",
    ),
]
ContextOption = Annotated[
    str | None,
    typer.Option("--context", help="Kubeconfig context to use (default: its current context)."),
]
