"""The launcher's added wall time per step, against running the same no-op command bare.

Measured in one run, on this machine (ratios and differences, never absolute claims):
- bare:            `python -c pass`
- launcher, CPU:   the same under `python -m secureml.enforcement.launch --`, isolation none
                   (config, audit; identity and GPU stages skipped)          target <= 150 ms median
- launcher, GPU:   the same on the fake GPU (tests/support/fakegpu.py): preflight, scrub before and after
                   (verify sample), watchdog
- scrub throughput: the launcher's scrub GB/s against the fake driver's own cuMemsetD32 over the
                   same memory, in a process of its own (on the fake a zero-fill is hole punching,
                   so this shows the scrub's own overhead, not a GPU's bandwidth)

Run: `.venv/bin/python benchmarks/launcher.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from secureml.core import contract  # noqa: E402
from secureml.enforcement.audit import records_from_log  # noqa: E402

NOOP = [sys.executable, "-c", "pass"]
LAUNCH = [sys.executable, "-m", contract.LAUNCHER_MODULE, "--"]


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(contract.ENV_PREFIX)}
    env.update(extra)
    return env


def timed(command: list[str], env: Mapping[str, str], runs: int) -> tuple[list[float], str]:
    """Wall seconds of each run (after one warm-up); the last run's stderr."""
    stderr = ""
    samples = []
    for attempt in range(runs + 1):
        started = time.perf_counter()
        proc = subprocess.run(command, env=dict(env), capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"{command} failed ({proc.returncode}):\n{proc.stderr}")
        if attempt:
            samples.append(elapsed)
        stderr = proc.stderr
    return samples, stderr


def report(name: str, samples: list[float], bare: float) -> None:
    median = statistics.median(samples)
    print(
        f"{name:<28} median {median * 1e3:8.1f} ms   added {(median - bare) * 1e3:8.1f} ms   "
        f"x{median / bare:5.2f} of bare"
    )


MEMSET_PROBE = """
import ctypes, sys, time
size = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemsetD32_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t]
assert cuda.cuInit(0) == 0
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(pointer), size) == 0
assert cuda.cuMemsetD32_v2(pointer.value, 1, size // 4) == 0  # touch every page first
best = float("inf")
for _ in range(3):
    started = time.perf_counter()
    assert cuda.cuMemsetD32_v2(pointer.value, 0, size // 4) == 0
    assert cuda.cuCtxSynchronize() == 0
    best = min(best, time.perf_counter() - started)
print(size / best / 1e9)
"""


def fake_gpu_section(tmp: Path, runs: int, bare: float) -> None:
    from tests.support.fakegpu import FakeDevice, FakeGPU, MiB

    memory = 256 * MiB
    gpu = FakeGPU(tmp / "fakegpu", [FakeDevice(memory=memory)])
    gpu_env = gpu.env(
        clean_env(
            {
                contract.ENV_ISOLATION: "dedicated",
                contract.ENV_GPU_REQUEST: json.dumps(
                    {"kind": "whole", "count": 1, "product": None}
                ),
                contract.ENV_PIPELINE: "bench",
                contract.ENV_STEP: "noop-gpu",
                contract.ENV_AUDIT_DIR: str(tmp / "audit-gpu"),
            }
        )
    )
    preflight_only, _ = timed(LAUNCH + NOOP, gpu_env, runs)
    report("launcher, fake GPU, no scrub", preflight_only, bare)
    scrub_env = gpu_env | {
        contract.ENV_SCRUB_BEFORE: "true",
        contract.ENV_SCRUB_AFTER: "true",
        contract.ENV_SCRUB_VERIFY: "sample",
    }
    with_scrub, stderr = timed(LAUNCH + NOOP, scrub_env, runs)
    report("launcher, fake GPU + scrubs", with_scrub, bare)

    (record,) = records_from_log(stderr)
    stages = {s["name"]: s for s in record["stages"]}
    for name in ("preflight", "scrub-before", "scrub-after"):
        print(f"{'':<28} stage {name:<13} {stages[name]['seconds'] * 1e3:8.1f} ms")
    scrub_gbps = stages["scrub-before"]["detail"]["devices"][0]["gb_per_s"]
    probe = subprocess.run(
        [sys.executable, "-c", MEMSET_PROBE, str(memory)],
        env=gpu.env(clean_env({})),
        capture_output=True,
        text=True,
        check=True,
    )
    memset_gbps = float(probe.stdout)
    print(
        f"{'scrub throughput':<28} {scrub_gbps:8.2f} GB/s (alloc + memset + sync of {memory // MiB} MiB)"
        f" vs the fake's own cuMemsetD32 {memset_gbps:8.2f} GB/s: x{scrub_gbps / memset_gbps:5.2f}"
    )
    print(
        f"{'':<28} (the fake zero-fills by punching holes in a sparse file: this ratio is the scrub's\n"
        f"{'':<28}  own overhead over a free memset, not a GPU figure; scrub vs device memset needs a GPU)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="secureml-bench-") as tmp:
        base = clean_env({})
        bare_samples, _ = timed(NOOP, base, args.runs)
        bare = statistics.median(bare_samples)
        print(f"{'bare python -c pass':<28} median {bare * 1e3:8.1f} ms")

        cpu_env = clean_env(
            {
                contract.ENV_ISOLATION: contract.ISOLATION_NONE,
                contract.ENV_PIPELINE: "bench",
                contract.ENV_STEP: "noop",
                contract.ENV_AUDIT_DIR: str(Path(tmp) / "audit-cpu"),
            }
        )
        cpu_samples, _ = timed(LAUNCH + NOOP, cpu_env, args.runs)
        report("launcher, CPU step", cpu_samples, bare)
        added_ms = (statistics.median(cpu_samples) - bare) * 1e3
        print(
            f"{'':<28} target: added <= 150 ms median -> {'met' if added_ms <= 150 else 'MISSED'}"
        )
        fake_gpu_section(Path(tmp), args.runs, bare)


if __name__ == "__main__":
    main()
