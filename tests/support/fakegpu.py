"""The fake GPU for tests: `secureml.enforcement.simulator` plus what only the tests need.

The simulator (the fake `libcuda.so.1` / `libnvidia-ml.so.1`, `FakeGPU`, `FakeDevice`, ...) lives
in the package, since `secureml run --simulate-gpu` uses it too; this module re-exports it under the
names the tests have always used, and caches the tests' builds under `build/test-native/` (or
`SECUREML_TEST_BUILD_DIR`). A test describes the machine it wants with `FakeGPU(...)`, then runs
the code under test in a subprocess with `gpu.env()`.

`RealGPU` offers the same `env()` over the machine's own driver (see the `fake_gpu` fixture in
conftest.py), so tests that only use `env()` run unchanged on a GPU machine. `build_shim()` builds
the quota shim from the current sources, with any extra flags (sanitizers, a compiled-in path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from secureml.enforcement import shim_control, simulator
from secureml.enforcement.simulator import (  # noqa: F401  (the tests' API)
    CONFIG_ENV,
    FAKE_DIR,
    SHIM_DIR,
    FakeConfidential,
    FakeDevice,
    FakeGPU,
    FakeMig,
    FakeProcess,
    GiB,
    MiB,
    build_fake_libs,
    build_native,
    compiler,
)
from tests.support.paths import REPO

CACHE_DIR = Path(os.environ.get("SECUREML_TEST_BUILD_DIR", REPO / "build" / "test-native"))
os.environ.setdefault(simulator.BUILD_DIR_ENV, str(CACHE_DIR))


class RealGPU:
    """The machine's own driver, for running the same tests on a GPU machine."""

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return dict(os.environ if base is None else base)


def real_gpu_available() -> bool:
    """True when `nvidia-smi` lists at least one GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        result = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def run_python(
    code: str, env: dict[str, str], *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter with `env` (e.g. `gpu.env()`); stdout/stderr captured."""
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )


def build_shim(*, flags: tuple[str, ...] = (), name: str = "libsecureml_shim.so") -> Path:
    """Build the quota shim from the current sources (cached like the fakes). `flags` may add,
    e.g., sanitizers or `-DSHIM_DEFAULT_LIMITS="..."` for a test of the compiled-in path."""
    sources = [SHIM_DIR / name for name in shim_control.SOURCES]
    headers = tuple(SHIM_DIR / name for name in shim_control.HEADERS)
    return build_native(
        name,
        sources,
        shared=True,
        flags=(f"-Wl,-soname,{name}", *flags),
        headers=headers,
        libs=("-ldl",),
    )
