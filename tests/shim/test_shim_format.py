"""The C sources are in clang-format's style (.clang-format, `make fmt-c`): checked where Debian's
clang-format 14 is installed (another major version formats some constructs differently)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("enforcement/shim", "enforcement/shim/fake", "enforcement/shim/fuzz", "tests/shim")


def test_c_sources_are_clang_formatted() -> None:
    tool = shutil.which("clang-format")
    if tool is None:
        pytest.skip("clang-format is not installed (apt-get install clang-format)")
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    major = re.search(r"version (\d+)", version)
    if not major or major.group(1) != "14":
        pytest.skip(f"clang-format 14 formats these sources; this is {version.strip()}")
    sources = sorted(
        str(path) for folder in FOLDERS for path in (REPO / folder).glob("*.[ch]") if path.is_file()
    )
    result = subprocess.run(
        [tool, "--dry-run", "--Werror", *sources], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, f"run `make fmt-c`:\n{result.stderr[:4000]}"
