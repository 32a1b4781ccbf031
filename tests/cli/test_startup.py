"""`secureml --help` imports what listing the commands needs only: none of the heavy libraries
the commands use (their wall time is measured, not asserted, by benchmarks/startup.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("kfp", "sigstore", "grpc", "cel", "celpy", "cel_expr_python", "google.protobuf", "rich")
PROBE = """
import sys
from secureml.cli import app
sys.argv = ["secureml", *sys.argv[1:]]
try:
    app()
except SystemExit:
    pass
print("MODULES", *sorted(sys.modules))
"""


@pytest.mark.parametrize("argv", [["--help"], ["profile", "--help"], ["check-pod", "--help"]])
def test_help_imports_no_heavy_library(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "Usage: secureml" in done.stdout
    loaded = done.stdout.split("MODULES", 1)[1].split()
    heavy = sorted({m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")})
    assert not heavy, f"`secureml {' '.join(argv)}` imported {heavy}"
