"""Cost of the quota shim per intercepted call, against the fake CUDA driver alone.

Runs tests/shim/shim_driver.c's `bench` mode (4 KiB cuMemAlloc_v2 + cuMemFree_v2 pairs, and
cuLaunchKernel calls) in the same run with and without the shim preloaded, in one process and in
8 contending processes sharing one step's accounting. Prints ns per call and the shim's added cost
and ratio. Target: <= 100 ns added per call uncontended. Kernels take no simulated time here, so a
launch measures the interception, not the pacing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fakegpu import SHIM_DIR, FakeDevice, FakeGPU, build_native, build_shim  # noqa: E402

CALLS_ALONE = 200_000
CALLS_CONTENDED = 50_000
CONTENDERS = 8
REPEATS = 3


def _run(driver: Path, env: dict[str, str], processes: int, calls: int) -> dict[str, float]:
    """Median over the processes of their ns per call, for alloc/free and for launch; all processes
    start timing at the same instant."""
    figures = {}
    for what in ("alloc", "launch"):
        start = time.monotonic_ns() + 300_000_000  # after every process has started and warmed up
        procs = [
            subprocess.Popen(
                [str(driver), "bench", str(calls), what, str(start)],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        results = [json.loads(p.communicate(timeout=120)[0])["ns_per_call"] for p in procs]
        assert all(p.returncode == 0 for p in procs)
        figures[what] = statistics.median(results)
    return figures


def _interleaved(
    driver: Path, envs: dict[str, dict[str, str]], processes: int, calls: int
) -> dict[str, dict[str, float]]:
    """Best of REPEATS for every configuration, run in rotation so load changes hit all alike."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(REPEATS):
        for name, env in envs.items():
            run = _run(driver, env, processes, calls)
            best[name] = {key: min(best.get(name, run)[key], run[key]) for key in run}
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        gpu = FakeGPU(root / "gpu", [FakeDevice(memory=1 << 30)], kernel_us=0)
        driver = build_native(
            "shim_driver",
            [REPO / "tests" / "shim" / "shim_driver.c"],
            flags=(f"-I{SHIM_DIR}", f"-L{gpu.lib_dir}"),
            headers=(SHIM_DIR / "cuda_api.h",),
            libs=("-l:libcuda.so.1",),
        )
        shim = build_shim()
        configs = {}
        for name, scrub, compute in (
            ("shim", 0, 100),
            ("shim+scrub", 1, 100),
            ("shim+compute50", 0, 50),
        ):
            limits = root / f"limits-{name}"
            limits.write_text(
                f"version=1\nmemory={1 << 30}\ncompute={compute}\nscrub_on_free={scrub}\n"
            )
            env = gpu.env()
            env.update(LD_PRELOAD=str(shim), SECUREML_SHIM_LIMITS_FILE=str(limits))
            configs[name] = env
        print(
            f"shim cost per call against the fake driver alone (best of {REPEATS}, median over processes)"
        )
        print(
            f"{'mode':<16}{'processes':>10}{'call':>12}{'driver ns':>12}{'shim ns':>10}{'added ns':>10}{'ratio':>8}"
        )
        for processes, calls in ((1, CALLS_ALONE), (CONTENDERS, CALLS_CONTENDED)):
            best = _interleaved(driver, {"driver": gpu.env(), **configs}, processes, calls)
            base = best.pop("driver")
            for name, with_shim in best.items():
                for key, label in (("alloc", "alloc/free"), ("launch", "launch")):
                    driver_ns, shim_ns = base[key], with_shim[key]
                    print(
                        f"{name:<16}{processes:>10}{label:>12}{driver_ns:>12.1f}{shim_ns:>10.1f}"
                        f"{shim_ns - driver_ns:>10.1f}{shim_ns / driver_ns:>8.2f}"
                    )


if __name__ == "__main__":
    main()
