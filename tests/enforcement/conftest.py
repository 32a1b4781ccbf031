"""Run the launcher as the pod does: a separate process, configured only by its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from secureml.core import contract
from secureml.enforcement.audit import load_audit_records, records_from_log


@dataclass
class LaunchResult:
    returncode: int
    stdout: str
    stderr: str
    audit_dir: Path

    @property
    def record(self) -> dict[str, Any]:
        """The one audit record of this run, as written to the audit folder."""
        (record,) = load_audit_records(self.audit_dir)
        return record

    @property
    def logged_record(self) -> dict[str, Any]:
        """The one audit record of this run, as printed on stderr."""
        (record,) = records_from_log(self.stderr)
        return record

    def stage(self, name: str) -> dict[str, Any]:
        (entry,) = [s for s in self.logged_record["stages"] if s["name"] == name]
        return entry


Launch = Callable[..., LaunchResult]


def launcher_env(extra: Mapping[str, str], gpu: Any = None) -> dict[str, str]:
    """A clean environment (no SECUREML_* or SPIFFE variable of the test runner), then the GPU's
    (`FakeGPU`/`RealGPU` `.env()`: the driver to load), then `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(contract.ENV_PREFIX)
        and k not in (contract.SPIFFE_SOCKET_ENV, "CUDA_VISIBLE_DEVICES")
    }
    if gpu is not None:
        env = gpu.env(env)
    env.update(extra)
    return env


@pytest.fixture
def launch(tmp_path: Path) -> Launch:
    """`launch(command, env={...}, gpu=None, timeout=60)` runs the launcher to completion."""

    def run(
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        gpu: Any = None,
        timeout: float = 60,
    ) -> LaunchResult:
        audit_dir = tmp_path / "audit"
        full_env = launcher_env({contract.ENV_AUDIT_DIR: str(audit_dir), **(env or {})}, gpu)
        proc = subprocess.run(
            [sys.executable, "-m", contract.LAUNCHER_MODULE, "--", *command],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return LaunchResult(proc.returncode, proc.stdout, proc.stderr, audit_dir)

    return run
