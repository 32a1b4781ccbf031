"""Go modules' own files (CRDs, manifests, runtimes) read from the Go module cache, never kept in
the repository: `go mod download` fetches a module through the module proxy where it is absent."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

from .controlplane import HarnessError


@functools.cache
def module_dir(module: str) -> Path:
    """The folder of `module` (`path@version`) in the Go module cache."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": ""},
        cwd="/",
    )
    if done.returncode != 0:
        raise HarnessError(f"go mod download {module}: {done.stderr.strip()}")
    return Path(json.loads(done.stdout)["Dir"])
