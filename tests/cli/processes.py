"""A Python source run as a new process from the repository's root: how the CLI's tests run the
program as its console script would, with what they need to watch registered first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_source(source: str, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`python -c SOURCE ARGV...` in the repository's root; its exit code is not checked."""
    return subprocess.run(
        [sys.executable, "-c", source, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
