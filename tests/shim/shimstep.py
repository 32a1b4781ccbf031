"""A step under the quota shim: limits file, counters file, the shim and a driver program, all real."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.fakegpu import SHIM_DIR, FakeGPU, build_native, run_python

HERE = Path(__file__).resolve().parent


def driver_for(gpu: FakeGPU, *, flags: tuple[str, ...] = (), name: str = "shim_driver") -> Path:
    """The C driver program (tests/shim/shim_driver.c), linked against the fake libcuda.so.1."""
    return build_native(
        name,
        [HERE / "shim_driver.c"],
        flags=(f"-I{SHIM_DIR}", f"-L{gpu.lib_dir}", *flags),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )


class Step:
    """One step's processes: a fake GPU, the shim preloaded, limits and counters in `folder`."""

    def __init__(
        self,
        gpu: FakeGPU,
        folder: Path,
        shim: Path,
        *,
        memory: int,
        compute: int = 100,
        scrub: bool = True,
        firewall: bool | None = None,
    ) -> None:
        self.gpu = gpu
        self.folder = folder
        self.shim = shim
        self.limits_file = folder / "limits"
        self.counters_file = folder / "counters"
        self.limits_file.write_text(
            f"version=1\nmemory={memory}\ncompute={compute}\nscrub_on_free={int(scrub)}\n"
            + ("" if firewall is None else f"firewall={int(firewall)}\n")
        )
        self.limits_file.chmod(0o444)
        self.driver = driver_for(gpu)

    def env(self, **extra: str) -> dict[str, str]:
        env = self.gpu.env()
        env["LD_PRELOAD"] = str(self.shim)
        env["SECUREML_SHIM_LIMITS_FILE"] = str(self.limits_file)
        env["SECUREML_SHIM_COUNTERS_FILE"] = str(self.counters_file)
        env.update(extra)
        return env

    def run(self, *args: str, timeout: float = 60, **extra: str) -> dict:
        """Run the driver under the shim; its last stdout line is JSON."""
        result = subprocess.run(
            [str(self.driver), *args],
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, (
            f"driver {args} failed ({result.returncode}): {result.stderr}"
        )
        return json.loads(result.stdout.strip().splitlines()[-1])

    def popen(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.driver), *args],
            env=self.env(**extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def python(self, code: str, **extra: str) -> dict:
        result = run_python(code, self.env(**extra))
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    def counters(self) -> dict:
        from secureml.enforcement.shim_control import read_counters

        return read_counters(self.counters_file)


CUDA_PY = """
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0
def alloc(n):
    p = ctypes.c_uint64()
    return cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), p.value
"""
