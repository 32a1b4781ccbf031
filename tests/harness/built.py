"""The harness's Go-built programs: `build.sh MODULE` builds each once per machine (cached, locked)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


class HarnessError(RuntimeError):
    """A harness service could not be built or started; the message says what to look at."""


def built(module: str, programs: Sequence[str] = (), *, override: str | None = None) -> Path:
    """The `bin/` folder of `module` as build.sh leaves it, built if absent; `override` (a folder
    of prebuilt programs) is used instead. Raises HarnessError naming what is missing."""
    if override:
        folder = Path(override)
    else:
        if shutil.which("go") is None:
            raise HarnessError(
                f"the harness builds {module} from source with Go (1.26 or newer) and 'go' is not "
                "on PATH: install Go (make deps) or use prebuilt programs"
            )
        done = subprocess.run(
            [str(HERE / "build.sh"), module], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise HarnessError(
                f"tests/harness/build.sh {module} failed (exit {done.returncode}):\n"
                f"{done.stderr[-4000:]}"
            )
        folder = Path(done.stdout.strip().splitlines()[-1]) / "bin"
    for name in programs:
        if not os.access(folder / name, os.X_OK):
            raise HarnessError(f"{folder / name} is missing or not executable")
    return folder
